#include "eager/autograd.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"

#include "core/eager_hooks.h"
#include "core/error.h"
#include "eager/ops.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"

namespace tandem {
namespace {

thread_local bool grad_enabled = true;

const std::shared_ptr<AutogradMeta>& meta_of(const Tensor& t) { return t.impl_ptr()->autograd; }

bool needs_grad(const Tensor& t) {
  const auto& meta = meta_of(t);
  return meta != nullptr && (meta->requires_grad || meta->grad_fn != nullptr);
}

// A handle on the same data with no autograd state: what nodes save, so that
// a node never holds (through its outputs) the node that made them.
Tensor detached(const Tensor& t) { return t.snapshot(); }

// See Note [How the tape records].
class Tape final : public kernels::DispatchObserver {
 public:
  void on_op(const kernels::OpDef& op, absl::Span<const Tensor> inputs,
             absl::Span<const Tensor> outputs, const kernels::Attrs& attrs,
             const std::source_location& where) override {
    if (!grad_enabled || !op.differentiable) return;
    if (std::none_of(inputs.begin(), inputs.end(), needs_grad)) return;
    auto node = std::make_shared<AutogradNode>();
    node->op = &op;
    node->attrs = attrs;
    node->where = where;
    for (const Tensor& input : inputs) {
      node->inputs.push_back(detached(input));
      node->edges.push_back(AutogradNode::edge_to(input));
    }
    node->num_outputs = static_cast<int>(outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
      node->outputs.push_back(detached(outputs[k]));
      if (!is_floating_point(outputs[k].dtype())) continue;  // No gradient through ints.
      auto meta = std::make_shared<AutogradMeta>();
      meta->grad_fn = node;
      meta->output_index = static_cast<int>(k);
      outputs[k].impl_ptr()->autograd = std::move(meta);
    }
  }
};

Tape& tape() {
  static Tape* instance = [] {
    auto* t = new Tape;  // Never destroyed: ops may run during exit.
    kernels::add_process_observer(t);
    return t;
  }();
  return *instance;
}

Tensor accumulate(const Tensor& sum, const Tensor& addend) {
  return sum.defined() ? kernels::call1(kernels::elementwise::Add::kName, {sum, addend}) : addend;
}

// Every node reachable from `root`, producers after their consumers. Holds
// the nodes, so that releasing one node's edges during backward cannot free
// a node still to be visited.
std::vector<std::shared_ptr<AutogradNode>> reverse_topological_order(
    const std::shared_ptr<AutogradNode>& root) {
  std::vector<std::shared_ptr<AutogradNode>> postorder;
  absl::flat_hash_map<AutogradNode*, bool> visited;
  // Iterative DFS: deep graphs (long unrolled loops) must not overflow the stack.
  std::vector<std::pair<std::shared_ptr<AutogradNode>, size_t>> stack{{root, 0}};
  visited[root.get()] = true;
  while (!stack.empty()) {
    auto& [node, next_edge] = stack.back();
    if (next_edge < node->edges.size()) {
      std::shared_ptr<AutogradNode> child = node->edges[next_edge++].node;
      if (child != nullptr && !visited[child.get()]) {
        visited[child.get()] = true;
        stack.push_back({std::move(child), 0});
      }
    } else {
      postorder.push_back(std::move(node));
      stack.pop_back();
    }
  }
  std::reverse(postorder.begin(), postorder.end());
  return postorder;
}

}  // namespace

AutogradNode::Edge AutogradNode::edge_to(const Tensor& input) {
  Edge edge;
  if (const auto& meta = meta_of(input)) {
    if (meta->grad_fn) {
      edge.node = meta->grad_fn;
      edge.output_index = meta->output_index;
    } else if (meta->requires_grad) {
      edge.leaf = meta;
    }
  }
  return edge;
}

NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }
bool grad_mode_enabled() { return grad_enabled; }

namespace {

// The gradient backward() starts from: `gradient`, or 1 for a scalar.
Tensor seed_gradient(const Tensor& tensor, const Tensor& gradient) {
  Tensor seed = gradient;
  if (!seed.defined()) {
    TANDEM_CHECK(tensor.numel() == 1, "backward() without a gradient needs a scalar, got shape ",
                 tensor.shape().to_string(), "; pass the gradient of the output");
    std::vector<int64_t> dims(tensor.shape().begin(), tensor.shape().end());
    // On the tensor's device: a gradient formula may broadcast the seed to a
    // full tensor, which must not land on the CPU beside GPU tensors.
    seed = kernels::call1(
        kernels::ones_op(), {},
        {{"shape", dims}, {"dtype", tensor.dtype()}, {"device", tensor.device().to_string()}},
        std::source_location::current());
  }
  TANDEM_CHECK(seed.shape() == tensor.shape() && seed.dtype() == tensor.dtype(),
               "backward(): the gradient has shape ", seed.shape().to_string(), " ",
               dtype_name(seed.dtype()), ", the tensor ", tensor.shape().to_string(), " ",
               dtype_name(tensor.dtype()));
  TANDEM_CHECK(seed.device() == tensor.device() || (seed.rank() == 0 && seed.device().is_cpu()),
               "backward(): the gradient is on ", seed.device().to_string(), ", the tensor on ",
               tensor.device().to_string());
  return seed;
}

// One gradient per input of `node`, given one per output (undefined where
// none flowed).
std::vector<Tensor> node_input_grads(const AutogradNode& node, std::vector<Tensor> grad_outputs) {
  if (node.released) {
    throw Error(str_cat("backward through the graph a second time, but its saved tensors "
                        "were freed by the first backward(); pass retain_graph=true to the "
                        "first one (the node was recorded here)"),
                node.display_name(), node.where);
  }
  grad_outputs.resize(node.num_outputs);
  CallSiteScope site(node.display_name().c_str(), node.where);
  std::vector<Tensor> input_grads;
  if (node.backward) {
    // Every output gets a gradient: zeros where none flowed.
    for (size_t k = 0; k < grad_outputs.size(); ++k) {
      if (grad_outputs[k].defined()) continue;
      const Tensor& out = node.outputs[k];
      grad_outputs[k] =
          kernels::call1(kernels::zeros_op(), {},
                         {{"shape", std::vector<int64_t>(out.shape().begin(), out.shape().end())},
                          {"dtype", out.dtype()},
                          {"device", out.device().to_string()}},
                         node.where);
    }
    input_grads = node.backward(grad_outputs);
  } else {
    absl::InlinedVector<bool, 4> needs_input_grad;
    for (const AutogradNode::Edge& edge : node.edges) {
      needs_input_grad.push_back(edge.node != nullptr || edge.leaf != nullptr);
    }
    input_grads = node.op->gradient(kernels::GradContext{node.inputs, node.outputs, grad_outputs,
                                                         node.attrs, needs_input_grad});
  }
  TANDEM_INTERNAL_ASSERT(input_grads.size() == node.inputs.size(), "gradient of '",
                         node.display_name(), "' returned ", input_grads.size(), " tensors for ",
                         node.inputs.size(), " inputs");
  return input_grads;
}

using PendingGrads = absl::flat_hash_map<AutogradNode*, std::vector<Tensor>>;

// Sends each input gradient of `node` along its edge: into the pending
// gradients of the node that made the input, or into a leaf's grad().
void route_input_grads(const AutogradNode& node, absl::Span<const Tensor> input_grads,
                       PendingGrads& pending) {
  for (size_t i = 0; i < node.edges.size(); ++i) {
    const AutogradNode::Edge& edge = node.edges[i];
    const Tensor& g = input_grads[i];
    if (!g.defined()) continue;
    TANDEM_INTERNAL_ASSERT(g.shape() == node.inputs[i].shape(), "gradient of '",
                           node.display_name(), "' for input ", i, " has shape ",
                           g.shape().to_string(), ", the input ",
                           node.inputs[i].shape().to_string());
    if (edge.node) {
      auto& slot = pending[edge.node.get()];
      slot.resize(edge.node->num_outputs);
      slot[edge.output_index] = accumulate(slot[edge.output_index], g);
    } else if (edge.leaf) {
      edge.leaf->grad = accumulate(edge.leaf->grad, g);
    }
  }
}

// Frees the saved tensors now, and the edges too, so that a long graph is
// torn down node by node here rather than by deep recursion later.
void release(AutogradNode& node) {
  node.inputs.clear();
  node.outputs.clear();
  node.edges.clear();
  node.backward = nullptr;  // Holds the saved values of a replayed graph.
  node.released = true;
}

struct PostBackwardHooks {
  std::mutex mu;
  int64_t next_id = 0;
  std::vector<std::pair<int64_t, std::function<void()>>> hooks;
};

PostBackwardHooks& post_backward_hooks() {
  static auto* hooks = new PostBackwardHooks;  // Never destroyed: backward may run at exit.
  return *hooks;
}

void run_post_backward_hooks() {
  std::vector<std::function<void()>> hooks;
  {
    PostBackwardHooks& all = post_backward_hooks();
    std::lock_guard lock(all.mu);
    if (all.hooks.empty()) return;
    for (const auto& entry : all.hooks) hooks.push_back(entry.second);
  }
  for (const std::function<void()>& hook : hooks) hook();  // Unlocked: a hook may remove itself.
}

void run_backward(const Tensor& tensor, const Tensor& gradient, bool retain_graph) {
  const auto& meta = meta_of(tensor);
  TANDEM_CHECK(meta != nullptr && (meta->grad_fn || meta->requires_grad),
               "backward() on a tensor that does not require grad: no input of the ops that "
               "made it had requires_grad_()");
  Tensor seed = seed_gradient(tensor, gradient);
  // Gradients are computed with ops but not recorded: no double backward yet.
  NoGradGuard no_grad;
  if (seed.device() != tensor.device()) seed = seed.to(tensor.device());  // A CPU scalar.
  if (!meta->grad_fn) {  // A leaf: its gradient is the seed.
    meta->grad = accumulate(meta->grad, seed);
    run_post_backward_hooks();
    return;
  }
  PendingGrads pending;
  pending[meta->grad_fn.get()].resize(meta->grad_fn->num_outputs);
  pending[meta->grad_fn.get()][meta->output_index] = seed;
  for (const std::shared_ptr<AutogradNode>& node : reverse_topological_order(meta->grad_fn)) {
    auto it = pending.find(node.get());
    if (it == pending.end()) continue;  // Nothing flowed here (e.g. only through ints).
    std::vector<Tensor> grad_outputs = std::move(it->second);
    pending.erase(it);
    route_input_grads(*node, node_input_grads(*node, std::move(grad_outputs)), pending);
    if (!retain_graph) release(*node);
  }
  run_post_backward_hooks();
}

void set_requires_grad(const Tensor& tensor, bool requires_grad) {
  TANDEM_CHECK(is_floating_point(tensor.dtype()) || !requires_grad,
               "only floating-point tensors can require grad, this one is ",
               dtype_name(tensor.dtype()));
  auto& meta = tensor.impl_ptr()->autograd;
  TANDEM_CHECK(meta == nullptr || meta->grad_fn == nullptr,
               "requires_grad_() is for leaf tensors; this one is the result of op '",
               meta ? meta->grad_fn->display_name() : "", "' (use detach() to make a leaf)");
  tape();  // Start recording on every thread.
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = requires_grad;
}

// Tensor's autograd methods and to(device) (Note [Eager hooks] in
// core/eager_hooks.h).
class Hooks final : public EagerHooks {
 public:
  void set_requires_grad(const Tensor& tensor, bool requires_grad) const override {
    tandem::set_requires_grad(tensor, requires_grad);
  }
  bool requires_grad(const Tensor& tensor) const override { return needs_grad(tensor); }
  Tensor grad(const Tensor& tensor) const override {
    const auto& meta = meta_of(tensor);
    return meta ? meta->grad : Tensor();
  }
  void zero_grad(const Tensor& tensor) const override {
    if (const auto& meta = meta_of(tensor)) meta->grad = Tensor();
  }
  void backward(const Tensor& tensor, const Tensor& gradient, bool retain_graph) const override {
    run_backward(tensor, gradient, retain_graph);
  }
  Tensor to(const Tensor& tensor, Device device, const std::source_location& where) const override {
    return tandem::to(tensor, device, where);
  }
};

// Installed while eager is initialized. Every program that links tandem::eager
// keeps this object file: eager/CMakeLists.txt names the anchor below to
// the linker.
const bool hooks_installed = [] {
  static const Hooks hooks;
  set_eager_hooks(&hooks);
  return true;
}();

}  // namespace

extern "C" const bool* tandem_eager_hooks_anchor() { return &hooks_installed; }

int64_t add_post_backward_hook(std::function<void()> hook) {
  PostBackwardHooks& all = post_backward_hooks();
  std::lock_guard lock(all.mu);
  all.hooks.emplace_back(all.next_id, std::move(hook));
  return all.next_id++;
}

void remove_post_backward_hook(int64_t id) {
  PostBackwardHooks& all = post_backward_hooks();
  std::lock_guard lock(all.mu);
  std::erase_if(all.hooks, [id](const auto& entry) { return entry.first == id; });
}

void set_grad(const Tensor& leaf, Tensor grad) {
  const auto& meta = meta_of(leaf);
  TANDEM_CHECK(meta != nullptr && meta->requires_grad && meta->grad_fn == nullptr,
               "set_grad: the tensor is not a leaf that requires grad");
  TANDEM_CHECK(!grad.defined() || (grad.shape() == leaf.shape() && grad.dtype() == leaf.dtype()),
               "set_grad: a gradient of shape ", grad.shape().to_string(), " and dtype ",
               dtype_name(grad.dtype()), " for a leaf of shape ", leaf.shape().to_string(),
               " and dtype ", dtype_name(leaf.dtype()));
  meta->grad = std::move(grad);
}

}  // namespace tandem
