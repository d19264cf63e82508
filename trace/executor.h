// Executor: replays a graph on the engine (shared/DESIGN.md, "Replay").
//
//   trace::Executor exec(std::move(graph));
//   std::vector<Tensor> out = exec.run({x, weight, bias});  // returns at once
//
// Everything that does not depend on the call is decided when the executor
// is built: each node's kernel and resolved attributes, the buffer of every
// intermediate value (trace/passes/memory_plan.h), the tensors and engine
// vars each kernel reads and writes. A call checks its inputs, allocates the
// graph's outputs (fresh tensors, since the caller keeps them) and pushes one
// engine op per node: no shape inference, no intermediate allocation, no
// autograd tape. Failures surface like eager ones, at the first wait, naming
// the node's op and the user's line that traced it.
//
// Note [Segments]
// Pushing an op costs the frontend a few hundred nanoseconds, more than many
// small kernels take to run, so a replay that pushed every node would be
// bound by pushing (bench/README.md, bench_hybridize). The executor pushes
// runs of consecutive nodes as one engine op instead — a segment, like
// MXNet's bulk execution — reading and writing the union of its nodes' vars
// and running the kernels in order on one worker. Kernels that use every
// core still do (Note [Thread budget]); what a segment gives up is running
// two small independent nodes of one call on two workers at once. A failing
// node is still reported with its own op and traced line.
//
// Calls may overlap: the planned buffers are shared between calls, and the
// engine orders each call's writes after the previous call's reads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <vector>

#include "absl/types/span.h"

#include "core/device.h"
#include "core/tensor.h"
#include "trace/graph.h"
#include "trace/passes/memory_plan.h"

namespace tandem::trace {

struct ExecutorOptions {
  Device device = Device::cpu();
  // False gives every intermediate its own buffer (for comparison).
  bool plan_memory = true;
  // Consecutive nodes pushed as one engine op; see Note [Segments].
  int max_segment_nodes = 64;
};

class Executor {
 public:
  explicit Executor(Graph graph, ExecutorOptions options = {});
  ~Executor();
  Executor(Executor&&) noexcept;
  Executor& operator=(Executor&&) noexcept;

  // Runs the graph on `inputs`: one tensor per data or state input, in the
  // order of graph().inputs (constants are the executor's own). Throws
  // tandem::Error naming the input whose shape, dtype or device differs from
  // the graph's. Returns one tensor per graph output, without waiting.
  //
  // Random ops (those with a "seed" attribute) repeat the traced seed unless
  // `reseed` is given, which then maps each random node's traced seed to the
  // seed of this call (in node order): a fresh draw per node, as eager calls
  // would make.
  std::vector<Tensor> run(absl::Span<const Tensor> inputs,
                          const std::function<int64_t(int64_t traced_seed)>& reseed = {},
                          std::source_location where = std::source_location::current()) const;

  const Graph& graph() const;
  const MemoryPlan& memory_plan() const;

  // The precomputed steps; defined in executor.cc.
  struct Program;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace tandem::trace
