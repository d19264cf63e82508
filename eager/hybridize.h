// hybridize: one switch from eager execution to a traced, optimized graph.
//
//   // A whole training step, traced once per input signature, then replayed:
//   auto step = tandem::hybridize([&](const std::vector<Tensor>& in) {
//     optimizer.zero_grad();
//     Tensor loss = nn::cross_entropy(model->forward(in[0]), in[1]);
//     loss.backward();
//     optimizer.step();
//     return std::vector<Tensor>{loss};
//   });
//   for (auto& [x, y] : loader) step({x, y})[0];   // same results as eager
//
//   // Inference with a module: module.hybridize() (nn/module.h).
//
// The first call with a new signature (each input's shape, dtype and device,
// plus grad mode and a caller-given key such as a module's training flag)
// runs the function eagerly under a tracer (trace/tracer.h): its results are
// the eager ones. The recorded graph is optimized (trace/passes/pipeline.h)
// and later calls with that signature replay it (trace/executor.h), without
// running the C++ function: the parameters and optimizer state it read are
// read again live, the tensors it rebound with assign_ (parameter updates,
// running statistics) are rebound to the new values, and parameters'
// gradients land in grad() as eager backward() would put them.
//
// Note [What a trace cannot see]
// Only ops and assign_ are recorded. Host-side C++ state that changes between
// calls (a counter, a learning rate kept as a double, a handle rebound with
// `=`) is frozen at its value during the trace; Tandem's optimizers keep such
// state in tensors for this reason. Reading a tensor's value while tracing
// (item(), to_vector(), printing) throws tandem::Error: a branch on data
// cannot be traced. A hybridized call inside a trace runs eagerly, so the
// outer trace records its ops.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"

#include "core/tensor.h"
#include "serialization/model.h"
#include "trace/executor.h"

namespace tandem {

struct HybridizeOptions {
  // Traced graphs kept, least recently used dropped first.
  int cache_size = 8;
  // One warning on stderr when the function has been traced this many times
  // (shapes that change on every call defeat the cache), saying why the last
  // trace happened; 0: never. Traces before that print nothing: each one's
  // reason is in stats().last_trace_reason.
  int warn_after_traces = 4;
  // A new signature after the first trace is a tandem::Error instead.
  bool strict = false;
  // For the first `verify_calls` replays, also run the function eagerly and
  // compare every output, rebound state and gradient (see verify_tolerance);
  // the first difference is a tandem::Error naming the graph node and the
  // user's line that made the value.
  bool verify = false;
  int verify_calls = 2;
  double verify_rtol = 1e-5;
  double verify_atol = 1e-6;
  // Run the optimization passes (off: replay the graph as traced).
  bool optimize = true;
  // Plan intermediate buffers (off: one buffer per value, for comparison).
  bool plan_memory = true;
  // On a CUDA device, replay as one CUDA graph launch per call (off: node by
  // node, for comparison); Note [One launch per call] in trace/executor.h.
  bool cuda_graph = true;
  // The trace computes inference only (no parameter changes between calls):
  // lets passes fold parameters (e.g. batch norm into convolution).
  bool inference = false;
  // The function is a forward (a module's): with gradients enabled, its one
  // output gets autograd history through a traced backward graph, so a
  // later backward() reaches the parameters and inputs (Note [Differentiable
  // replay] in hybridize.cc). Off for functions that run backward themselves
  // (a whole training step).
  bool differentiable = false;
  // Input dimensions that may change from call to call without a new trace
  // (as ExportOptions::dynamic_dims: {{"input0", {{0, "batch"}, {1, "seq"}}}}).
  // The first trace also traces the function at a few other sizes and fits
  // its graph's sizes as expressions of these names (trace/symbolic_shapes.h);
  // a call whose shapes differ only there then instantiates that graph
  // (Stats::instantiations) instead of running the function again. Whole
  // training steps too: the runs at other sizes start from the state the
  // first call started from, and leave the state it left (Note [One trace
  // for every size] in hybridize.cc). Functions no one graph can follow (a
  // warning says why) trace per shape as without it.
  FreeDims dynamic_dims = {};
  // Names the graph in logs and TANDEM_DUMP_GRAPHS files.
  std::string name = "hybridized";
  // Names for the state a trace captures, asked at each trace: a hybridized
  // module gives its state_dict(), so that its graphs, their dumps and their
  // errors name "features.0.weight" rather than "state3". Unset, or a tensor
  // it does not list: "state<k>".
  std::function<std::vector<std::pair<std::string, Tensor>>()> state_names = {};
};

// A function of tensors, traced and replayed per input signature.
class HybridFunction {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

  explicit HybridFunction(Fn fn, HybridizeOptions options = {});
  ~HybridFunction();
  HybridFunction(HybridFunction&&) noexcept;
  HybridFunction& operator=(HybridFunction&&) noexcept;

  // Traces or replays. `key` is extra signature (a module's training flag).
  // Safe to call from several threads at once: calls take turns (a replay's
  // turn is the time to push its work; a trace's, the eager run of the
  // function), so results are those of some order of the calls (Note [Calls
  // from several threads] in hybridize.cc). The function itself then runs
  // on whichever thread traces; it must not wait for another thread's call
  // of this same function.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, int64_t key = 0,
                                 std::source_location where = std::source_location::current());

  struct Stats {
    int64_t traces = 0;   // Calls that traced (including the first).
    int64_t replays = 0;  // Calls that replayed a cached graph.
    int64_t eager = 0;    // Calls run eagerly (inside another trace).
    // Calls that instantiated a traced graph at new sizes of its free
    // dimensions (HybridizeOptions::dynamic_dims) instead of tracing.
    int64_t instantiations = 0;
    std::string last_trace_reason;
  };
  // The counters as of the last call; read them while no call of this
  // function is running on another thread (the reference is not locked).
  const Stats& stats() const;
  // The executor of the graph most recently traced or replayed; null before
  // the first call. For inspection: graph(), memory_plan(); as with stats(),
  // while no other thread calls (a later call may evict its graph).
  const trace::Executor* last_executor() const;
  const HybridizeOptions& options() const;

  // Writes the graph of the most recent call as `path`.json and
  // `path`.<checksum>.params (serialization/model.h), for tandem::load in a program
  // without this code. The graph must compute outputs only (no state updates
  // or gradients: trace an inference function). Its state inputs are named
  // from `names` (a tensor matched by its data) and otherwise "state<k>";
  // parameters are those that require grad, the rest buffers.
  void export_model(const std::string& path,
                    absl::Span<const std::pair<std::string, Tensor>> names = {},
                    const ExportOptions& options = {}) const;
  // The same graph as one ONNX file at `path` (serialization/onnx_export.h),
  // checked by reading it back with tandem::import_onnx.
  void export_onnx(const std::string& path,
                   absl::Span<const std::pair<std::string, Tensor>> names = {},
                   ExportOptions options = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// hybridize(fn): `fn` as a HybridFunction.
HybridFunction hybridize(HybridFunction::Fn fn, HybridizeOptions options = {});

}  // namespace tandem
