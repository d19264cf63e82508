#include "distributed/collectives.h"

#include <string>

#include "kernels/dispatch.h"

namespace tandem::distributed {
namespace {

int64_t group_attr(const ProcessGroup& group) { return group.id(); }
std::string reduction_attr(ReduceOp op) { return std::string(kernels::reduction_name(op)); }

}  // namespace

Tensor all_reduce(const Tensor& x, ReduceOp op, const ProcessGroup& group,
                  std::source_location where) {
  return kernels::call1<"all_reduce">(
      {x}, {{"group", group_attr(group)}, {"reduction", reduction_attr(op)}}, where);
}

Tensor broadcast(const Tensor& x, int root, const ProcessGroup& group, std::source_location where) {
  return kernels::call1<"broadcast">(
      {x}, {{"group", group_attr(group)}, {"root", static_cast<int64_t>(root)}}, where);
}

Tensor all_gather(const Tensor& x, const ProcessGroup& group, std::source_location where) {
  return kernels::call1<"all_gather">({x}, {{"group", group_attr(group)}}, where);
}

Tensor reduce_scatter(const Tensor& x, ReduceOp op, const ProcessGroup& group,
                      std::source_location where) {
  return kernels::call1<"reduce_scatter">(
      {x}, {{"group", group_attr(group)}, {"reduction", reduction_attr(op)}}, where);
}

}  // namespace tandem::distributed
