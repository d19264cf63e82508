// The collectives, as ops: all_reduce, broadcast, all_gather and
// reduce_scatter over a process group's communicator (kernels/
// communicator.h; distributed/ installs them). Like every op they return at
// once and their outputs are new tensors; the exchange happens when the
// engine runs them, in program order across the group (Note [Collectives
// run in program order]), and it does not hold a worker while it waits
// (Note [Ops that finish later] in core/engine/engine.h).
//
// CUDA tensors go through the communicator's launch() on the op's stream
// (NCCL), CPU tensors through start() (MPI on a communication thread).
//
// Not differentiable: gradients of a data-parallel model are averaged after
// backward (distributed::DistributedDataParallel), not propagated through a
// collective.
#include <string>
#include <vector>

#include "kernels/communicator.h"
#include "kernels/ops/families.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

int group_size(const Attrs& attrs) {
  return communicator(static_cast<int>(attrs.get_int("group")))->size();
}

// Reductions combine numbers: float32, float64, int32, int64, uint8, and a
// mean only floats.
void check_reducible(const TensorMeta& x, const Attrs& attrs) {
  const Reduction reduction = parse_reduction(attrs.get_string("reduction"));
  const DType dtype = x.dtype;
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kInt32 ||
                   dtype == DType::kInt64 || dtype == DType::kUInt8,
               "cannot reduce ", dtype_name(dtype),
               " across processes; expected float32, float64, int32, int64 or uint8");
  TANDEM_CHECK(reduction != Reduction::kMean || is_floating_point(dtype), "a mean of ",
               dtype_name(dtype), " across processes is not defined; use sum");
}

TensorMetas infer_all_reduce(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_reducible(in[0], attrs);
  group_size(attrs);  // The group must exist.
  return {in[0]};
}

TensorMetas infer_broadcast(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const int size = group_size(attrs);
  const int64_t root = attrs.get_int("root");
  TANDEM_CHECK(root >= 0 && root < size, "root ", root, " is not a rank of process group ",
               attrs.get_int("group"), ", whose ranks are 0 to ", size - 1);
  return {in[0]};
}

TensorMetas infer_all_gather(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const int64_t size = group_size(attrs);
  std::vector<int64_t> dims(in[0].shape.dims().begin(), in[0].shape.dims().end());
  if (dims.empty()) {
    dims.push_back(size);
  } else {
    dims[0] = checked_mul(dims[0], size, "the gathered first dimension");
  }
  return {{Shape(dims), in[0].dtype}};
}

TensorMetas infer_reduce_scatter(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_reducible(in[0], attrs);
  const int64_t size = group_size(attrs);
  TANDEM_CHECK(in[0].shape.rank() > 0 && in[0].shape[0] % size == 0, "the first dimension of ",
               in[0].shape.to_string(), " must split evenly among the group's ", size, " ranks");
  std::vector<int64_t> dims(in[0].shape.dims().begin(), in[0].shape.dims().end());
  dims[0] /= size;
  return {{Shape(dims), in[0].dtype}};
}

template <CollectiveKind kKind>
void collective_kernel(const KernelContext& context) {
  const Attrs& attrs = context.attrs;
  CollectiveCall call;
  call.kind = kKind;
  call.input = context.inputs[0];
  call.output = context.outputs[0];
  if (attrs.has("reduction")) call.reduction = parse_reduction(attrs.get_string("reduction"));
  if (attrs.has("root")) call.root = static_cast<int>(attrs.get_int("root"));
  std::shared_ptr<Communicator> group = communicator(static_cast<int>(attrs.get_int("group")));
  run_collective(*group, std::move(call), context.run);
}

OpDef collective_op(std::string name, std::vector<AttrSpec> attrs, InferFn infer, KernelFn cpu,
                    std::string doc) {
  attrs.insert(attrs.begin(), AttrSpec{"group", int64_t{0}});
  OpDef op{.name = std::move(name),
           .attrs = std::move(attrs),
           .infer = infer,
           .cpu = cpu,
           .differentiable = false,
           .doc = std::move(doc),
           .collective = true};
#ifdef TANDEM_WITH_CUDA
  // The same function on a GPU: run_collective enqueues the call on the op's
  // stream there (Communicator::launch, NCCL in distributed/).
  op.cuda = cpu;
#endif
  return op;
}

}  // namespace

std::string_view reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kMean:
      return "mean";
    case Reduction::kMax:
      return "max";
    case Reduction::kMin:
      return "min";
  }
  return "?";
}

Reduction parse_reduction(std::string_view name) {
  for (Reduction r : {Reduction::kSum, Reduction::kMean, Reduction::kMax, Reduction::kMin}) {
    if (reduction_name(r) == name) return r;
  }
  TANDEM_CHECK(false, "unknown reduction '", name, "'; expected sum, mean, max or min");
  return Reduction::kSum;
}

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "collective";
}

void register_collective_ops(Registry& registry) {
  registry.add(collective_op(std::string(collective_name(CollectiveKind::kAllReduce)),
                             {{"reduction", std::string("sum")}}, infer_all_reduce,
                             collective_kernel<CollectiveKind::kAllReduce>,
                             "every rank's x combined (sum, mean, max, min), on every rank"));
  registry.add(collective_op(std::string(collective_name(CollectiveKind::kBroadcast)),
                             {{"root", int64_t{0}}}, infer_broadcast,
                             collective_kernel<CollectiveKind::kBroadcast>,
                             "the root rank's x, on every rank"));
  registry.add(collective_op(std::string(collective_name(CollectiveKind::kAllGather)), {},
                             infer_all_gather, collective_kernel<CollectiveKind::kAllGather>,
                             "every rank's x concatenated along dimension 0, in rank order"));
  registry.add(collective_op(std::string(collective_name(CollectiveKind::kReduceScatter)),
                             {{"reduction", std::string("sum")}}, infer_reduce_scatter,
                             collective_kernel<CollectiveKind::kReduceScatter>,
                             "the ranks' x combined, then split along dimension 0: rank r keeps "
                             "the r-th part"));
}

}  // namespace tandem::kernels
