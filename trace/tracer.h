// Tracer: records the ops a piece of eager code runs into a Graph.
//
//   trace::Tracer tracer;                     // starts recording on this thread
//   ValueId x_id = tracer.add_input(x, "x");
//   Tensor y = model.forward(x);              // runs eagerly, and is recorded
//   tracer.add_output(y, "y");
//   trace::Trace result = tracer.finish();    // stops recording
//
// The code runs for real (the first call's results are the eager ones) while
// the tracer, a dispatch observer (kernels/dispatch.h), adds one node per op.
//
// Note [How traced values are identified]
// Ops never write into existing memory: each output of a traced op is a new
// storage (eager reshape and flatten return views, OpDef::is_view, but not
// while a tracer observes them), so a storage's contents never change once
// written. A value is therefore named by the data it is — (storage, byte
// offset, shape, dtype) — not by the Tensor handle that holds it, and
// rebinding a handle (assign_) cannot confuse the tracer. A tensor whose
// storage the trace has seen at another offset or shape is a view (made by
// Tensor::reshape/slice/select, or by eager reshape and flatten before the
// trace); the tracer records them as reshape and slice nodes, when they are
// made (told by core/tensor_observer.h, so the nodes carry the user's line)
// or, for views of data from outside the trace, when an op reads them. A tensor whose
// storage it has never seen comes from outside (a parameter, a buffer,
// optimizer state, a captured constant): it becomes a state input, read live
// from that very handle on every replay. The tracer does not keep the
// storages it has seen alive (a traced training step frees its activations
// as eagerly as an untraced one): it holds a weak reference beside each, and
// an address whose storage has died names nothing any more, whatever new
// storage comes to live there.
//
// Note [State the traced code rebinds]
// Tensor::assign_ on a tensor that existed before the trace (an optimizer
// updating a parameter, BatchNorm updating its running mean) is seen through
// core/tensor_observer.h. finish() lists each such tensor with the value it
// holds at the end, so a replay can rebind it the same way.
//
// Reading a value on the host while tracing (item(), to_vector(), printing)
// throws tandem::Error at the user's line: the trace would freeze whichever
// branch that value chose.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "core/tensor.h"
#include "core/tensor_observer.h"
#include "kernels/dispatch.h"
#include "trace/graph.h"

namespace tandem::trace {

// A tensor outside the graph that the traced code rebound with assign_, and
// the graph output holding its final value.
struct StateWrite {
  Tensor target;
  int output;  // Index into Graph::outputs.
};

struct Trace {
  Graph graph;
  // One handle per kState input, in the order of those inputs.
  std::vector<Tensor> state;
  std::vector<StateWrite> state_writes;
};

class Tracer final : public kernels::DispatchObserver, public TensorObserver {
 public:
  // Starts recording the ops of this thread.
  Tracer();
  ~Tracer() override;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // True while a Tracer records on this thread (a hybridized block called
  // inside a trace then runs eagerly, so the outer trace sees its ops).
  static bool active();

  // Declares `tensor` a data input of the graph.
  ValueId add_input(const Tensor& tensor, std::string name);
  // Declares `tensor` an output; recorded as a view or state input if needed.
  int add_output(const Tensor& tensor, std::string name);
  // The graph value holding `tensor`'s data, if the trace has made or seen
  // that data; never records anything.
  std::optional<ValueId> find(const Tensor& tensor) const;

  // Stops recording; adds the outputs of Note [State the traced code
  // rebinds] after the caller's outputs.
  Trace finish();

  const Graph& graph() const { return graph_; }

  // Called with each tensor the moment it becomes a state input (the
  // hybridize layer notes parameters' gradients then).
  void set_on_capture(std::function<void(const Tensor&)> on_capture) {
    on_capture_ = std::move(on_capture);
  }

  // Names each state input by the tensor it captures (a module's parameter
  // or buffer path, "features.0.weight"), so that the graph, its dumps and
  // errors speak the user's language. An empty name, one an input already
  // has, or no namer: "state<k>" (a free k).
  void set_state_namer(std::function<std::string(const Tensor&)> namer) {
    state_namer_ = std::move(namer);
  }

  void on_op(const kernels::OpDef& op, absl::Span<const Tensor> inputs,
             absl::Span<const Tensor> outputs, const kernels::Attrs& attrs,
             const std::source_location& where) override;
  void on_value_read(const Tensor& tensor, const char* what,
                     const std::source_location& where) override;
  void on_assign(const Tensor& target, const Tensor& value) override;
  // Records a view of traced data as nodes at once, at the user's line.
  void on_view(const Tensor& view, const Tensor& base, const std::source_location& where) override;

 private:
  struct Known {
    size_t byte_offset;
    Shape shape;
    DType dtype;
    ValueId value;
  };

  // The value for `tensor`: known data, a view of known data (recorded), or a
  // new state input.
  ValueId value_of(const Tensor& tensor, const std::source_location& where);
  ValueId record_view(const Tensor& tensor, const Known& base, const std::source_location& where);
  void remember(const Tensor& tensor, ValueId value);
  // The module path of a node recorded now, relative to outer_scope_.
  std::string scope() const;

  Graph graph_;
  std::vector<Tensor> state_;
  absl::flat_hash_map<ValueId, size_t> state_index_;  // kState input -> index in state_.
  // The values seen in each storage (Note [How traced values are identified]).
  struct Seen {
    std::weak_ptr<Storage> storage;  // Expired: the address may hold other data now.
    std::vector<Known> values;
  };
  // The values known in `tensor`'s storage; null if none.
  const std::vector<Known>* known_in(const Tensor& tensor) const;
  absl::flat_hash_map<const Storage*, Seen> known_;
  // Handles made by recorded ops: rebinding them is not a state write.
  absl::flat_hash_set<const TensorImpl*> made_here_;
  std::vector<Tensor> assigned_;  // Pre-existing tensors rebound, first time order.
  absl::flat_hash_set<const TensorImpl*> assigned_set_;
  std::function<void(const Tensor&)> on_capture_;
  std::function<std::string(const Tensor&)> state_namer_;
  absl::flat_hash_set<std::string> input_names_;  // Of the graph's inputs so far.
  bool finished_ = false;
  // The module path where tracing started: the traced module's own
  // (Note [Name scopes] in core/error.h).
  std::string outer_scope_;
  std::unique_ptr<kernels::ObserverScope> op_scope_;
  std::unique_ptr<TensorObserverScope> tensor_scope_;
};

}  // namespace tandem::trace
