// The collectives, on tensors. Each returns at once, like every Tandem op;
// the exchange happens when the engine runs it, and reading the result
// waits for it (Note [Collectives run in program order] in
// kernels/communicator.h). Every rank of the group must call the same
// collectives in the same order, with tensors of the same shape and dtype.
//
//   Tensor sum = all_reduce(grad);                      // on every rank
//   Tensor mean = all_reduce(grad, ReduceOp::kMean);
//   Tensor w0 = broadcast(w, /*root=*/0);               // rank 0's w
//   Tensor all = all_gather(x);                         // [size * n, ...]
//   Tensor part = reduce_scatter(x);                    // [n / size, ...]
//
// Recorded by a tracer like any op, so a hybridized step replays them.
#pragma once

#include <source_location>

#include "core/tensor.h"
#include "kernels/communicator.h"

#include "distributed/distributed.h"

namespace tandem::distributed {

using ReduceOp = kernels::Reduction;

// Every rank's x combined elementwise: kSum, kMean (floats), kMax, kMin.
// float32, float64, int32, int64, uint8.
Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::kSum,
                  const ProcessGroup& group = ProcessGroup(),
                  std::source_location where = std::source_location::current());
// Rank `root`'s x, on every rank (any dtype).
Tensor broadcast(const Tensor& x, int root = 0, const ProcessGroup& group = ProcessGroup(),
                 std::source_location where = std::source_location::current());
// The ranks' x concatenated along dimension 0 in rank order (a scalar
// gathers to a vector of size()); any dtype.
Tensor all_gather(const Tensor& x, const ProcessGroup& group = ProcessGroup(),
                  std::source_location where = std::source_location::current());
// all_reduce's result split along dimension 0 into size() parts; rank r
// gets part r. Dimension 0 must divide evenly.
Tensor reduce_scatter(const Tensor& x, ReduceOp op = ReduceOp::kSum,
                      const ProcessGroup& group = ProcessGroup(),
                      std::source_location where = std::source_location::current());

}  // namespace tandem::distributed
