// Executor: replays a graph on the engine (docs/ARCHITECTURE.md, "Replay").
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
//
// Note [Small calls run on the caller]
// A call of a small graph on the CPU (batch-1 inference, a recurrent cell)
// runs on the calling thread when nothing it touches is pending, through
// Engine::run_if_free, as a tiny eager op does (Note [Tiny ops run inline]
// in core/engine/threaded_engine.cc): handing it to a worker and waking the
// caller when it is done cost more than the work. Small means every node
// runs on one core (OpDef::one_core; an OpenMP team started by the caller
// would compete with the worker's) and the nodes touch at most
// kInlineCallElements elements in all, a few tens of microseconds of work.
// Anything pending on its vars, a larger graph, or a GPU: the segments are
// pushed as usual. Either way the call returns the same outputs, and a
// failing node is reported with its own op and traced line.
//
// Note [One launch per call]
// On a CUDA device a call is one engine op, and from the second call on one
// launch of a CUDA graph: the first call runs the kernels as usual (which
// creates the library handles, picks convolution algorithms and fills the
// allocator's cache), the second records them into a graph while running
// nothing, then launches it. A graph holds fixed addresses, so it reads
// and writes the executor's own copies of the call's inputs and outputs:
// a call copies its inputs in, launches the graph and copies the outputs
// out, three operations on the stream however many nodes the graph has.
// Scratch memory the kernels took during the capture stays with the graph
// (KeepNewStorages in core/storage.h). A graph whose kernels cannot be
// captured (a kernel that synchronizes or allocates on the device) is
// replayed node by node instead, as are calls that reseed random nodes,
// whose seeds a graph would freeze.
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
  // On a CUDA device: replay as one CUDA graph launch; see Note [One launch
  // per call].
  bool cuda_graph = true;
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
