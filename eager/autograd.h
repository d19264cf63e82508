// Autograd: a tape of the differentiable ops run on tensors that require
// grad, and backward() through it (Tensor's methods in core/tensor.h).
//
//   Tensor w = Tensor::from_vector<double>({1, 2}, {2}).requires_grad_();
//   Tensor y = tandem::sum(tandem::mul(w, w));
//   y.backward();
//   w.grad().to_vector<double>();  // {2, 4}
//
// Note [How the tape records]
// The tape is a dispatch observer (kernels/dispatch.h) for every thread. When
// an op has an input that requires grad and the op is differentiable, it
// makes a Node holding the op, its inputs, its outputs (detached handles, so
// no cycle keeps them alive), its attrs and one edge per input: to the Node
// that produced the input, or to the input's own AutogradMeta if it is a
// leaf. backward() walks the Nodes reachable from the loss in reverse
// topological order and calls each op's registered gradient, which is itself
// written with ops: so backward runs on the engine like any other work, and
// the tracer (hybridize) sees backward as ordinary ops. Gradients flowing to
// the same place are summed with the "add" op.
#pragma once

#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/registry.h"

namespace tandem {

struct AutogradNode;

struct AutogradMeta {
  bool requires_grad = false;  // Set on leaves by requires_grad_().
  Tensor grad;                 // Accumulated into leaves by backward().
  // For results of recorded ops: the node that made them and which output.
  std::shared_ptr<AutogradNode> grad_fn;
  int output_index = 0;
};

struct AutogradNode {
  // Where an input's gradient goes: a node's output, or a leaf.
  struct Edge {
    std::shared_ptr<AutogradNode> node;
    int output_index = 0;
    std::shared_ptr<AutogradMeta> leaf;
  };
  // Where the gradient of `input` goes (an empty Edge if it needs none).
  static Edge edge_to(const Tensor& input);
  const kernels::OpDef* op = nullptr;
  // Set instead of `op` for a node made outside the tape: a hybridized
  // block's replayed graph (eager/differentiable_graph.h), whose gradient is
  // its traced backward graph. Called with one gradient per output (zeros
  // where none flowed); returns one per input.
  std::function<std::vector<Tensor>(absl::Span<const Tensor> grad_outputs)> backward;
  std::string name;  // What errors call a node without `op`.
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  int num_outputs = 0;  // outputs.size() until backward frees them.
  kernels::Attrs attrs;
  std::vector<Edge> edges;  // One per input; empty Edge for no gradient.
  std::source_location where;
  bool released = false;  // Set when backward freed the saved tensors.

  const std::string& display_name() const { return op != nullptr ? op->name : name; }
};

// While alive, ops on this thread are not recorded (like torch::NoGradGuard):
// for inference, and for updates that must not become part of the graph.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True unless a NoGradGuard is alive on this thread.
bool grad_mode_enabled();

// Runs `hook` at the end of every backward() in this process, on the thread
// that called it, once backward has pushed the gradient of every leaf it
// reached (pushed, not computed: the gradients are still being computed
// when the hook runs). DistributedDataParallel starts averaging gradients
// there, so that the averaging overlaps what remains of backward. Ops the
// hook calls are not recorded by autograd. Returns an id for
// remove_post_backward_hook.
int64_t add_post_backward_hook(std::function<void()> hook);
void remove_post_backward_hook(int64_t id);

// Replaces a leaf's accumulated gradient (DistributedDataParallel's average
// of every rank's); `grad` must have the leaf's shape and dtype.
void set_grad(const Tensor& leaf, Tensor grad);

}  // namespace tandem
