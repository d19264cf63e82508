// oneDNN glue for the CPU kernels: one process-wide engine, a stream per
// call, and memory objects that wrap Tensor data in place (no copies).
//
//   dnnl::memory::desc md = onednn::desc(x.shape(), dnnl::memory::format_tag::nchw);
//   onednn::execute(dnnl::convolution_forward(pd),
//                   {{DNNL_ARG_SRC, onednn::wrap(x, pd.src_desc())}, ...});
//
// Only float32 goes through oneDNN: it has no float64 for most primitives, so
// each op keeps a plain-loop float64 path (which the gradient checks use).
// oneDNN's own exceptions (dnnl::error) never leave these helpers: they become
// tandem::Error naming the primitive, so an op that fails on a worker fails
// its outputs like any other kernel error. Internal to kernels/.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/shape.h"
#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/registry.h"

namespace tandem::kernels::onednn {

// The CPU engine, created on first use and shared by every kernel (oneDNN
// engines are thread-safe; primitives are cached by oneDNN itself).
const dnnl::engine& cpu_engine();

// The dims of `shape` as oneDNN wants them.
dnnl::memory::dims dims_of(const Shape& shape);
dnnl::memory::dims dims_of(std::initializer_list<int64_t> dims);

// A float32 descriptor with a format tag, or with explicit strides (for
// transposed views).
dnnl::memory::desc desc(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag);
dnnl::memory::desc strided_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides);

// A memory object over the tensor's own elements. The descriptor must match
// the tensor's layout and size; the tensor must outlive the memory. oneDNN
// takes a non-const pointer even for inputs; it never writes them.
dnnl::memory wrap(const Tensor& tensor, const dnnl::memory::desc& md);

// Note [Small primitives on one thread]
// oneDNN divides a primitive's work among as many threads as OpenMP allows
// when the primitive is made, and wakes that many at each run. For a small
// call (LeNet-5 at batch 1: convolutions of 0.1-0.2M multiply-adds) waking
// the team costs more than the work, and its helper then spins on the core
// the caller needs: two thirds of that model's profile was OpenMP spinning.
// So kernels make and run such calls inside a OneThread scope (constructed
// with `small` true), where OpenMP gives this thread one thread: primitives
// made there are single-threaded
// (the primitive cache keys on the thread count, Note [Primitive cache]),
// the call needs no all-cores lock (its op says so through OpDef::one_core)
// and it may run on the thread that pushed it.
inline constexpr int64_t kOneThreadWork = int64_t{1} << 20;  // Multiply-adds or elements.

class OneThread {
 public:
  // One OpenMP thread for this scope where `small`; otherwise changes nothing.
  explicit OneThread(bool small);
  ~OneThread();
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;  // The thread count to restore; 0 where nothing was changed.
};

// Creates the primitive descriptor with `make` and converts a dnnl::error
// (typically "unimplemented") into a tandem::Error naming `what`.
template <class F>
auto make_pd(std::string_view what, F&& make) -> decltype(make());

// Runs `primitive` on a fresh stream of the CPU engine and waits for it.
void execute(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args,
             std::string_view what);

// Note [Blocked layouts]
// Tensors keep plain layouts (NCHW, OIHW), but oneDNN's fast convolution
// kernels (jit:avx512_core and kin) want blocked ones, nChw16c (channels in
// blocks of 16, innermost) and matching weights; given plain layouts only,
// oneDNN falls back to im2col + gemm. On the 2-core AVX-512 development
// machine, for the tutorial CNN's second convolution (batch 128, 32 -> 64
// channels, 14x14) the jit kernels take ~2.4 ms per direction against ~4.8
// ms for gemm, and for its first (1 -> 32 channels, 28x28) the weight
// gradient takes 0.24 ms against 4.3 ms; the reorders into and out of the
// blocked layouts cost a few percent of that. So a convolution describes its
// arguments with format_tag::any, lets oneDNN choose, and runs through
// execute_in_layouts below, which converts each argument whose chosen layout
// differs from the tensor's on the way in (inputs) or out (outputs).

// The channels per block of the blocked layouts oneDNN's JIT kernels use on
// this CPU: 16 with AVX-512 (nChw16c), 8 below it (nChw8c).
int64_t channel_block();

// An argument of a primitive: its DNNL_ARG_* id, the tensor, and the layout
// of the tensor's elements.
struct TensorArg {
  int id;
  const Tensor* tensor;
  dnnl::memory::desc layout;
};

// Runs `primitive` (made from `pd`) on a fresh stream and waits for it. An
// input the primitive wants in another layout is first reordered into
// scratch memory, an output is computed there and reordered into its tensor
// afterwards (Note [Blocked layouts]). The scratch memory is kept per thread
// and reused, so a call does not allocate and page in megabytes each time.
void execute_in_layouts(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
                        std::initializer_list<TensorArg> inputs,
                        std::initializer_list<TensorArg> outputs, std::string_view what);

// Creates oneDNN's static state now, on the calling thread, and makes the
// engine drain before it is destroyed at exit (Note [oneDNN at exit]).
// Called once, by the registry, before any op runs.
void warm_up();

// The same for oneDNN's gemm (Note [oneDNN's gemm, warmed when first
// needed]): called before dnnl_sgemm and before making a primitive whose
// implementation calls the gemm; only the first call does anything.
void warm_up_gemm();

// Note [Fused activation]
// conv2d and linear take "activation" (none, or the name of an elementwise
// op with a PostOp in kernels/elementwise_ops.h, such as relu, leaky_relu or
// gelu) and "alpha" (the activation's parameter, for one that has one, such
// as leaky_relu's slope), so that activation fusion (trace/passes/activation_fusion.h)
// can fold the activation node that follows them into the layer. On the
// oneDNN path the activation is an eltwise post-op: applied to each output
// element while it is still in registers, instead of another pass over the
// whole tensor. Other paths (float64, empty inner dimension, CUDA) apply the
// op's own formula afterwards. oneDNN's primitive cache keys on the
// primitive_attr too, so layers that differ only in their activation never
// share a cached primitive.
struct FusedActivation {
  const ElementwiseInfo* op = nullptr;  // Null: no activation.
  double alpha = 0;                     // The op's parameter, if it has one.
};

// The activation attributes both layers add to their schema.
std::vector<AttrSpec> activation_attrs();
// Parses them; throws tandem::Error for a name that is no fusable
// activation (inference calls it, so the message names the op and the
// user's line).
FusedActivation fused_activation(const Attrs& attrs);
// `attrs` without the activation attributes: what the layer's gradient
// passes to ops that do not declare them.
Attrs without_activation(const Attrs& attrs);
// A primitive_attr with the activation as an eltwise post-op (empty for none).
dnnl::primitive_attr post_op_attr(const FusedActivation& activation);

// Applies the activation in place, with the op's formula.
void apply_activation(const FusedActivation& activation, float* data, int64_t count);
void apply_activation(const FusedActivation& activation, double* data, int64_t count);

// Converts the dnnl::error being handled into a tandem::Error (rethrows).
[[noreturn]] void rethrow_dnnl_error(std::string_view what);

template <class F>
auto make_pd(std::string_view what, F&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const dnnl::error&) {
    rethrow_dnnl_error(what);
  }
}

}  // namespace tandem::kernels::onednn
