#include "kernels/cpu/onednn.h"

#include <omp.h>
#include <pthread.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

#include "core/engine/engine.h"
#include "core/error.h"
#include "kernels/cpu/primitive_cache.h"
#include "kernels/cpu/team_binding.h"
#include "kernels/elementwise_ops.h"

namespace tandem::kernels::onednn {

// Note [oneDNN threads]
// OpenMP keeps its default of one thread per core: a oneDNN kernel uses the
// whole machine, and dispatch runs such kernels one at a time (Note [Thread
// budget] in kernels/dispatch.h), so the engine's workers and OpenMP's threads
// never multiply.
//
// Note [oneDNN at exit]
// oneDNN creates static state (its primitive cache) when the first primitive
// is made. At exit, statics die in reverse order of construction, and the
// engine's exit-time drain was registered when the engine started: if the
// cache were created later (by the first kernel, on a worker), it would be
// destroyed while workers still run the last pushed kernels. So before the
// first op is dispatched, the registry calls warm_up(), which makes and runs
// one tiny primitive on the caller's thread, then asks the engine to drain
// before anything constructed so far is destroyed. (When the main thread
// uses Tandem, the engine drains even before any static object is
// destroyed: Note [Draining at exit] in core/engine/engine.cc.)
//
// Note [oneDNN's gemm, warmed when first needed]
// oneDNN's gemm (dnnl_sgemm, and primitives whose implementation is named
// "gemm", such as some convolution backward passes) keeps its JIT kernels in
// statics of its own, made on its first call, which JIT-compiles the whole
// kernel set: 32-35 ms on the 2-core development machine, most of what
// loading a model and running it once cost when warm_up() made them too.
// Inference rarely needs them (its products are brgemm primitives), so
// warm_up_gemm() makes them only before the gemm's first use, with a tiny
// sgemm, and then asks again for a drain at exit, which therefore runs
// before those statics are destroyed.
//
// Note [OpenMP across fork]
// libgomp does not survive fork(): a child whose forking thread had an
// OpenMP team hangs in its next parallel region, waiting for threads that
// exist only in the parent. The engine restarts its workers around a fork
// (Note [Engines across fork] in core/engine/threaded_engine.cc), which
// gives each a new team; for kernels run on the forking thread itself (the
// naive engine, the caller's own OpenMP code) warm_up() registers a
// pthread_atfork handler that releases that thread's team before the fork,
// so that its next parallel region, in the parent and in the child, starts
// a new one.

const dnnl::engine& cpu_engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

OneThread::OneThread(bool small) : saved_(small ? omp_get_max_threads() : 0) {
  if (saved_ != 0) omp_set_num_threads(1);
}

OneThread::~OneThread() {
  if (saved_ != 0) omp_set_num_threads(saved_);
}

int64_t channel_block() {
  static const int64_t block = [] {
    // avx512_core and everything above it share this bit; avx2 and avx2_vnni lack it.
    const auto avx512_core_bit = static_cast<unsigned>(dnnl::cpu_isa::avx512_core) &
                                 ~static_cast<unsigned>(dnnl::cpu_isa::avx2);
    return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & avx512_core_bit) != 0 ? 16 : 8;
  }();
  return block;
}

dnnl::memory::dims dims_of(const Shape& shape) {
  return dnnl::memory::dims(shape.begin(), shape.end());
}

dnnl::memory::dims dims_of(std::initializer_list<int64_t> dims) {
  return dnnl::memory::dims(dims.begin(), dims.end());
}

dnnl::memory::desc desc(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag);
}

dnnl::memory::desc strided_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

dnnl::memory wrap(const Tensor& tensor, const dnnl::memory::desc& md) {
  TANDEM_INTERNAL_ASSERT(tensor.dtype() == DType::kFloat32, "oneDNN path given ",
                         dtype_name(tensor.dtype()));
  TANDEM_INTERNAL_ASSERT(md.get_size() <= tensor.nbytes(), "descriptor of ", md.get_size(),
                         " bytes over a tensor of ", tensor.nbytes());
  return dnnl::memory(md, cpu_engine(), tensor.raw_data());
}

void rethrow_dnnl_error(std::string_view what) {
  try {
    throw;
  } catch (const dnnl::error& e) {
    detail::throw_check_failure(str_cat("oneDNN ", what, " failed: ", e.what(), " (status ",
                                        static_cast<int>(e.status), ")"));
  }
}

void execute(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args,
             std::string_view what) {
  try {
    dnnl::stream stream(cpu_engine());
    primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error&) {
    rethrow_dnnl_error(what);
  }
}

namespace {

// The calling thread's scratch buffer number `slot`, at least `bytes` long
// and 64-byte aligned (a cache line, what oneDNN's kernels prefer). Buffers
// only grow: the convolutions of one model ask for the same sizes each step.
void* scratch(size_t slot, size_t bytes) {
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  struct Buffer {
    std::unique_ptr<std::byte[], Free> data;
    size_t size = 0;
  };
  thread_local std::vector<Buffer> buffers;
  if (buffers.size() <= slot) buffers.resize(slot + 1);
  Buffer& b = buffers[slot];
  if (b.size < bytes) {
    b.data.reset(new (std::align_val_t{64}) std::byte[bytes]);
    b.size = bytes;
  }
  return b.data.get();
}

// The reorder from layout `from` to `to` (Note [Primitive cache]).
std::shared_ptr<const CachedPrimitive<dnnl::reorder>> reorder(const dnnl::memory::desc& from,
                                                              const dnnl::memory::desc& to) {
  return cached_primitive<dnnl::reorder>(
      "reorder", PrimitiveKey().add(from.data).add(to.data),
      [&] { return dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to); });
}

}  // namespace

void execute_in_layouts(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
                        std::initializer_list<TensorArg> inputs,
                        std::initializer_list<TensorArg> outputs, std::string_view what) {
  try {
    dnnl::stream stream(cpu_engine());
    std::unordered_map<int, dnnl::memory> args;
    std::vector<std::pair<dnnl::memory, dnnl::memory>> converted_outputs;  // (scratch, tensor)
    size_t slot = 0;
    auto bind = [&](const TensorArg& a, bool is_input) {
      dnnl::memory tensor = wrap(*a.tensor, a.layout);
      dnnl::memory::desc wanted = pd.query_md(dnnl::query::exec_arg_md, a.id);
      if (wanted == a.layout) {
        args.emplace(a.id, tensor);
        return;
      }
      dnnl::memory converted(wanted, cpu_engine(), scratch(slot++, wanted.get_size()));
      if (is_input) {
        reorder(a.layout, wanted)->primitive.execute(stream, tensor, converted);
      } else {
        converted_outputs.emplace_back(converted, tensor);
      }
      args.emplace(a.id, converted);
    };
    for (const TensorArg& a : inputs) bind(a, /*is_input=*/true);
    for (const TensorArg& a : outputs) bind(a, /*is_input=*/false);
    primitive.execute(stream, args);
    for (auto& [converted, tensor] : converted_outputs) {
      reorder(converted.get_desc(), tensor.get_desc())
          ->primitive.execute(stream, converted, tensor);
    }
    stream.wait();
  } catch (const dnnl::error&) {
    rethrow_dnnl_error(what);
  }
}

std::vector<AttrSpec> activation_attrs() {
  return {{"activation", std::string("none")}, {"alpha", 0.01}};
}

FusedActivation fused_activation(const Attrs& attrs) {
  static constexpr auto kOps = elementwise::UnaryOps::infos();
  const std::string& name = attrs.get_string("activation");
  if (name == "none") return {};
  std::string known = "none";
  for (const ElementwiseInfo& op : kOps) {
    if (op.post_op.algorithm == PostOpAlgorithm::kNone) continue;
    if (name == op.name) return {&op, attrs.get_float("alpha")};
    known += str_cat(", ", op.name);
  }
  detail::throw_check_failure(str_cat("activation must be one of ", known, "; got '", name, "'"));
}

Attrs without_activation(const Attrs& attrs) {
  Attrs rest;
  for (const auto& [name, value] : attrs.items()) {
    if (name != "activation" && name != "alpha") rest.set(name, value);
  }
  return rest;
}

dnnl::primitive_attr post_op_attr(const FusedActivation& activation) {
  dnnl::primitive_attr attr;
  if (activation.op == nullptr) return attr;
  const PostOp& post = activation.op->post_op;
  dnnl::algorithm algorithm = dnnl::algorithm::eltwise_relu;
  switch (post.algorithm) {
    case PostOpAlgorithm::kNone:
    case PostOpAlgorithm::kRelu:
      break;
    case PostOpAlgorithm::kTanh:
      algorithm = dnnl::algorithm::eltwise_tanh;
      break;
    case PostOpAlgorithm::kElu:
      algorithm = dnnl::algorithm::eltwise_elu;
      break;
    case PostOpAlgorithm::kLogistic:
      algorithm = dnnl::algorithm::eltwise_logistic;
      break;
    case PostOpAlgorithm::kGeluErf:
      algorithm = dnnl::algorithm::eltwise_gelu_erf;
      break;
    case PostOpAlgorithm::kSwish:
      algorithm = dnnl::algorithm::eltwise_swish;
      break;
    case PostOpAlgorithm::kMish:
      algorithm = dnnl::algorithm::eltwise_mish;
      break;
    case PostOpAlgorithm::kHardswish:
      algorithm = dnnl::algorithm::eltwise_hardswish;
      break;
  }
  const float alpha = post.alpha_is_param ? static_cast<float>(activation.alpha) : post.alpha;
  dnnl::post_ops ops;
  ops.append_eltwise(post.scale, algorithm, alpha, post.beta);
  attr.set_post_ops(ops);
  return attr;
}

namespace {

template <class T>
void apply_formula(const FusedActivation& activation, T* data, int64_t count) {
  if (activation.op == nullptr) return;
  elementwise::UnaryOps::visit(activation.op->code, [&]<class Op>() {
    if constexpr (Op::kPostOp.algorithm != PostOpAlgorithm::kNone) {
      const Op f = make_formula<Op>(activation.alpha, 0);
      for (int64_t i = 0; i < count; ++i) data[i] = f(data[i]);
    }
  });
}

}  // namespace

void apply_activation(const FusedActivation& activation, float* data, int64_t count) {
  apply_formula(activation, data, count);
}
void apply_activation(const FusedActivation& activation, double* data, int64_t count) {
  apply_formula(activation, data, count);
}

namespace {

void release_openmp_team_before_fork() { omp_pause_resource_all(omp_pause_soft); }

}  // namespace

void warm_up() {
  // A TANDEM_BIND_THREADS the workers would refuse fails here, on the caller's
  // thread, at its first op.
  team_binding_enabled();
  static std::once_flag at_fork;
  std::call_once(at_fork,
                 [] { pthread_atfork(release_openmp_team_before_fork, nullptr, nullptr); });
  dnnl::memory::desc md = desc({1, 1}, dnnl::memory::format_tag::ab);
  float a = 1, b = 1, c = 0;
  auto pd = make_pd("warm-up matmul", [&] {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), cpu_engine());
  });
  execute(dnnl::matmul(pd),
          {{DNNL_ARG_SRC, dnnl::memory(md, cpu_engine(), &a)},
           {DNNL_ARG_WEIGHTS, dnnl::memory(md, cpu_engine(), &b)},
           {DNNL_ARG_DST, dnnl::memory(md, cpu_engine(), &c)}},
          "warm-up matmul");
  engine::finish_before_exit();
}

void warm_up_gemm() {
  static std::once_flag once;
  std::call_once(once, [] {
    float x[4] = {1, 2, 3, 4}, y[4] = {1, 0, 0, 1}, z[4] = {};
    dnnl_sgemm('N', 'N', 2, 2, 2, 1.0f, x, 2, y, 2, 0.0f, z, 2);
    engine::finish_before_exit();
  });
}

}  // namespace tandem::kernels::onednn
