#include "eager/hybridize.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <list>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "eager/autograd.h"
#include "eager/export_check.h"
#include "eager/ops.h"
#include "eager/symbolic_trace.h"
#include "kernels/dispatch.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_export.h"
#include "serialization/onnx_import.h"
#include "trace/passes/pipeline.h"
#include "trace/subgraph.h"
#include "trace/tracer.h"

namespace tandem {
namespace {

// What decides whether a cached graph applies to a call.
struct Signature {
  // What each input is, as compared on every call (nothing formatted).
  struct Input {
    Shape shape;
    DType dtype;
    Device device;
    bool requires_grad;
    bool operator==(const Input&) const = default;
  };
  std::vector<Input> exact;
  std::vector<std::string> inputs;  // "float32[64, 784] cpu" per input, for messages and keys.
  bool grad_mode = true;
  int64_t key = 0;

  std::string text() const {
    std::string out = str_cat("grad=", grad_mode, " key=", key);
    for (const std::string& s : inputs) out += str_cat("; ", s);
    return out;
  }

  // Whether a call with these inputs, grad mode and key has this signature:
  // the check a replay makes against the most recently used graph before
  // anything is formatted.
  bool matches(const std::vector<Tensor>& call_inputs, bool call_grad_mode,
               int64_t call_key) const {
    if (call_grad_mode != grad_mode || call_key != key || call_inputs.size() != exact.size()) {
      return false;
    }
    for (size_t i = 0; i < exact.size(); ++i) {
      const Tensor& t = call_inputs[i];
      if (!t.defined() || t.dtype() != exact[i].dtype || t.device() != exact[i].device ||
          t.requires_grad() != exact[i].requires_grad || t.shape() != exact[i].shape) {
        return false;
      }
    }
    return true;
  }
};

Signature signature_of(const std::vector<Tensor>& inputs, int64_t key) {
  Signature sig;
  sig.grad_mode = grad_mode_enabled();
  sig.key = key;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    TANDEM_CHECK(t.defined(), "input ", i, " is an undefined tensor");
    sig.exact.push_back({t.shape(), t.dtype(), t.device(), t.requires_grad()});
    sig.inputs.push_back(str_cat(dtype_name(t.dtype()), t.shape().to_string(), " ",
                                 t.device().to_string(),
                                 t.requires_grad() ? " requires_grad" : ""));
  }
  return sig;
}

// How many parts of two signatures differ.
int distance(const Signature& a, const Signature& b) {
  if (a.inputs.size() != b.inputs.size()) return 1 << 20;
  int d = (a.grad_mode != b.grad_mode) + (a.key != b.key);
  for (size_t i = 0; i < a.inputs.size(); ++i) d += a.inputs[i] != b.inputs[i];
  return d;
}

// Why `now` needs a new trace, compared with the closest signature traced
// before (`last`).
std::string retrace_reason(const Signature* last, const Signature& now) {
  if (last == nullptr) return "first call";
  if (last->inputs.size() != now.inputs.size()) {
    return str_cat("the number of inputs changed from ", last->inputs.size(), " to ",
                   now.inputs.size());
  }
  for (size_t i = 0; i < now.inputs.size(); ++i) {
    if (last->inputs[i] != now.inputs[i]) {
      return str_cat("input ", i, " changed from ", last->inputs[i], " to ", now.inputs[i]);
    }
  }
  if (last->grad_mode != now.grad_mode) {
    return str_cat("grad mode changed to ", now.grad_mode ? "enabled" : "disabled");
  }
  if (last->key != now.key)
    return str_cat("the mode key changed from ", last->key, " to ", now.key);
  return "a signature evicted from the cache came back";
}

AutogradMeta* leaf_meta(const Tensor& t) {
  AutogradMeta* meta = t.impl_ptr()->autograd.get();
  return meta != nullptr && meta->requires_grad && meta->grad_fn == nullptr ? meta : nullptr;
}

// Ones of y's shape, dtype and device, made without an op so that the tracer
// takes them for a graph input rather than a node: a filled CPU tensor, and
// on a GPU a copy of it pushed straight to the engine (the tracer sees
// dispatched ops only).
Tensor ones_without_op(const Tensor& y) {
  Tensor host = y.dtype() == DType::kFloat32
                    ? Tensor::from_vector<float>(std::vector<float>(y.numel(), 1.0f), y.shape())
                    : Tensor::from_vector<double>(std::vector<double>(y.numel(), 1.0), y.shape());
  if (y.device().is_cpu()) return host;
  Tensor out = Tensor::empty(y.shape(), y.dtype(), y.device());
  engine::current().push(
      [from = host.snapshot(), to = out.snapshot()](const engine::RunContext& context) {
        if (from.nbytes() != 0) {
          cuda::copy_async(to.raw_data(), from.raw_data(), from.nbytes(), context.stream);
        }
      },
      y.device(), {host.var()}, {out.var()}, "grad_output_seed");
  return out;
}

std::vector<double> values_of(const Tensor& t) {
  return kernels::call1(kernels::cast_op(), {t}, {{"dtype", DType::kFloat64}},
                        std::source_location::current())
      .to_vector<double>();
}

}  // namespace

// One traced graph and how to feed it and apply its results.
struct CachedGraph {
  Signature signature;
  std::string key_text;
  std::unique_ptr<trace::Executor> executor;
  size_t num_user_outputs = 0;

  // Per non-constant graph input, in order: where its tensor comes from.
  struct Binding {
    enum Kind { kData, kState, kGradOf } kind;
    size_t data_index = 0;
    Tensor handle;  // kState: the tensor; kGradOf: the parameter.
  };
  std::vector<Binding> bindings;
  std::vector<trace::StateWrite> state_writes;
  // A parameter's gradient after the call: a graph output, or cleared (-1).
  struct GradWrite {
    Tensor parameter;
    int output;
  };
  std::vector<GradWrite> grad_writes;
  int verify_left = 0;

  // A differentiable entry (see Note [Differentiable replay]): `executor` is
  // the forward graph, whose outputs are the user's, then the rebound state,
  // then the values the backward graph reads.
  struct Backward {
    std::shared_ptr<trace::Executor> executor;
    // Per backward-graph input: a forward call input (>= 0), the output's
    // gradient (kSeed), or saved forward output (kSaved - index).
    std::vector<int> source;
    static constexpr int kSeed = -1, kSaved = -2;
    // The autograd node's inputs: data inputs that require grad, then
    // parameters; and for each, the backward output holding its gradient.
    std::vector<size_t> data_inputs;
    std::vector<Tensor> parameters;
    std::vector<int> grad_output;  // -1: no gradient reaches it.
  };
  std::optional<Backward> backward;
};

namespace {

// The two graphs a differentiable trace is cut into.
struct ForwardBackward {
  trace::Graph forward, backward;
};

// Cuts the traced graph `g` (Note [Differentiable replay]): the forward is
// what the user's output and the state updates need; the backward, the rest
// of what the gradients (`grad_outputs`, indices into g.outputs or -1) need,
// with the forward values it reads saved as extra forward outputs. Fills
// `backward`'s input sources and gradient indices, and renumbers
// `state_writes` to the forward graph's outputs.
ForwardBackward cut_forward_backward(const trace::Graph& g, trace::ValueId seed,
                                     const std::vector<int>& grad_outputs,
                                     const std::vector<trace::GraphInput>& forward_inputs,
                                     std::vector<trace::StateWrite>& state_writes,
                                     CachedGraph::Backward& backward) {
  std::vector<trace::ValueId> forward_results;
  std::vector<trace::GraphOutput> forward_outputs;
  std::vector<int> forward_index(g.outputs.size(), -1);
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const bool is_grad = std::find(grad_outputs.begin(), grad_outputs.end(), static_cast<int>(o)) !=
                         grad_outputs.end();
    if (is_grad) continue;
    forward_index[o] = static_cast<int>(forward_outputs.size());
    forward_results.push_back(g.outputs[o].value);
    forward_outputs.push_back(g.outputs[o]);
  }
  for (trace::StateWrite& write : state_writes) {
    write.output = forward_index[static_cast<size_t>(write.output)];
  }
  std::vector<int> forward_nodes = trace::nodes_needed_for(g, forward_results);
  std::vector<bool> in_forward(g.nodes.size(), false);
  for (int n : forward_nodes) in_forward[static_cast<size_t>(n)] = true;
  std::vector<trace::ValueId> grad_values;
  std::vector<trace::GraphOutput> backward_outputs;
  for (int o : grad_outputs) {
    if (o < 0) continue;
    grad_values.push_back(g.outputs[static_cast<size_t>(o)].value);
    backward_outputs.push_back(g.outputs[static_cast<size_t>(o)]);
  }
  std::vector<int> backward_nodes = trace::nodes_needed_for(g, grad_values, in_forward);
  // Saved: values made by forward nodes that the backward reads or returns.
  std::vector<bool> made_by_forward(g.values.size(), false);
  for (int n : forward_nodes) {
    for (trace::ValueId id : g.nodes[static_cast<size_t>(n)].outputs) made_by_forward[id] = true;
  }
  std::vector<trace::ValueId> saved;
  absl::flat_hash_map<trace::ValueId, bool> is_saved;
  auto save = [&](trace::ValueId id) {
    if (made_by_forward[id] && !is_saved[id]) {
      is_saved[id] = true;
      saved.push_back(id);
    }
  };
  for (int n : backward_nodes) {
    for (trace::ValueId id : g.nodes[static_cast<size_t>(n)].inputs) save(id);
  }
  for (trace::ValueId id : grad_values) save(id);

  backward.source.clear();
  std::vector<trace::GraphInput> backward_inputs;
  int forward_position = 0;
  for (const trace::GraphInput& input : g.inputs) {
    backward_inputs.push_back(input);
    if (input.value == seed) {
      backward.source.push_back(CachedGraph::Backward::kSeed);
    } else {
      backward.source.push_back(forward_position++);
    }
  }
  const int first_saved = static_cast<int>(forward_outputs.size());
  for (size_t k = 0; k < saved.size(); ++k) {
    backward_inputs.push_back({saved[k], str_cat("saved", k), trace::InputKind::kData, Tensor()});
    backward.source.push_back(CachedGraph::Backward::kSaved - (first_saved + static_cast<int>(k)));
    forward_outputs.push_back({saved[k], str_cat("saved", k)});
  }
  int next = 0;
  std::vector<int> grad_output_index;
  for (int o : grad_outputs) grad_output_index.push_back(o < 0 ? -1 : next++);
  backward.grad_output = std::move(grad_output_index);

  return {trace::extract_subgraph(g, forward_nodes, forward_inputs, forward_outputs),
          trace::extract_subgraph(g, backward_nodes, backward_inputs, backward_outputs)};
}

// Whether two handles view the same data: a state input is named by the
// tensor whose data it is.
bool same_data(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.byte_offset() == b.byte_offset() &&
         a.shape() == b.shape() && a.dtype() == b.dtype();
}

// Names a captured tensor by the first of `names` with the same data, or
// "". Indexed by where the data lies: a model has hundreds of tensors.
std::function<std::string(const Tensor&)> state_namer(
    const std::vector<std::pair<std::string, Tensor>>& names) {
  using Place = std::pair<const Storage*, size_t>;
  absl::flat_hash_map<Place, std::vector<std::pair<std::string, Tensor>>> at;
  for (const auto& [name, tensor] : names) {
    at[Place{tensor.storage().get(), tensor.byte_offset()}].emplace_back(name, tensor);
  }
  return [at = std::move(at)](const Tensor& t) {
    auto it = at.find(Place{t.storage().get(), t.byte_offset()});
    if (it == at.end()) return std::string();
    for (const auto& [name, tensor] : it->second) {
      if (same_data(tensor, t)) return name;
    }
    return std::string();
  };
}

// A parameter the trace captured, with the gradient it had then: a
// gradient that is the same tensor at the end was not touched.
struct Leaf {
  Tensor parameter;
  Tensor grad_before;
};

// The inputs as the function sees them while traced: a differentiable trace
// starts from leaves, so that its backward stops at the graph's inputs
// instead of running into the caller's history.
std::vector<Tensor> trace_inputs(const std::vector<Tensor>& inputs, bool differentiable) {
  std::vector<Tensor> traced = inputs;
  if (differentiable) {
    for (Tensor& t : traced) {
      if (t.requires_grad()) t = t.detach().requires_grad_();
    }
  }
  return traced;
}

// A backward traced into the forward's graph (Note [Differentiable replay]).
struct TracedBackward {
  trace::ValueId seed;  // The graph input holding the output's gradient.
  // Per gradient, in backward.data_inputs then backward.parameters order:
  // its trace output, or -1 where none flowed.
  std::vector<int> grad_outputs;
  CachedGraph::Backward backward;  // Its sources are filled by the cut.
};

// Traces the backward of the one output `y`, with its gradient as a graph
// input, into the same trace: the gradients of the inputs that require one
// and of every captured parameter become trace outputs. The parameters'
// own gradients are left as they were.
TracedBackward trace_backward(trace::Tracer& tracer, const Tensor& y,
                              const std::vector<Tensor>& inputs,
                              const std::vector<Tensor>& traced_inputs,
                              const std::vector<Leaf>& leaves) {
  TANDEM_CHECK(y.dtype() == DType::kFloat32 || y.dtype() == DType::kFloat64,
               "a differentiable hybridized output must be float32 or float64, got ",
               dtype_name(y.dtype()));
  TracedBackward traced;
  const Tensor seed = ones_without_op(y);
  traced.seed = tracer.add_input(seed, "grad_output0");
  std::vector<Tensor> grads_before;
  for (const Leaf& leaf : leaves) {
    grads_before.push_back(leaf.parameter.grad());
    leaf_meta(leaf.parameter)->grad = Tensor();
  }
  y.backward(seed);
  auto add_grad = [&](const Tensor& g, const std::string& name) {
    traced.grad_outputs.push_back(g.defined() ? tracer.add_output(g, name) : -1);
  };
  for (size_t i = 0; i < traced_inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    traced.backward.data_inputs.push_back(i);
    add_grad(traced_inputs[i].grad(), str_cat("grad_input", i));
  }
  for (size_t j = 0; j < leaves.size(); ++j) {
    traced.backward.parameters.push_back(leaves[j].parameter);
    add_grad(leaves[j].parameter.grad(), str_cat("grad_param", j));
    leaf_meta(leaves[j].parameter)->grad = grads_before[j];
  }
  return traced;
}

// Without a traced backward: each captured parameter whose gradient the
// function replaced (a whole training step's backward) becomes an output
// the replay writes back, and one it cleared (zero_grad(set_to_none)) a
// gradient the replay clears.
void record_grad_writes(trace::Tracer& tracer, const std::vector<Leaf>& leaves,
                        std::vector<CachedGraph::GradWrite>& grad_writes) {
  for (const Leaf& leaf : leaves) {
    Tensor grad = leaf.parameter.grad();
    if (!grad.defined()) {
      if (leaf.grad_before.defined()) grad_writes.push_back({leaf.parameter, -1});
    } else if (!leaf.grad_before.defined() || grad.impl_ptr() != leaf.grad_before.impl_ptr()) {
      grad_writes.push_back(
          {leaf.parameter, tracer.add_output(grad, str_cat("grad", grad_writes.size()))});
    }
  }
}

// Note [A new plan starts from an empty cache]
// The traced call ran eagerly, and its activations went back to the CPU
// allocator's cache in sizes the graph's memory plan seldom reuses, so the
// plan's buffers came on top of them: LeNet-5's hybridized training step
// peaked at 1.13x (batch 64) and 1.22x (batch 256) of eager's RSS. So once
// the traced call's work is done (its outputs, and the state it wrote), the
// cache goes back to the system before the executors allocate their plans:
// 61 and 87 MiB then, against eager's 62 and 90. A trace happens once per
// signature; eager code afterwards pays a page fault per block it takes
// anew. A failure of the traced call's ops surfaces here, at the call.
// Best effort: a block the engine frees after the wait reaches the cache
// after it was emptied. Inside an outer trace no value may be waited for,
// and the outer trace's own plan comes later anyway.
void release_cache_after_trace(const std::vector<Tensor>& outputs,
                               const std::vector<trace::StateWrite>& writes, Device device) {
  if (!device.is_cpu() || trace::Tracer::active()) return;
  for (const Tensor& t : outputs) t.wait_to_read();
  for (const trace::StateWrite& write : writes) write.target.wait_to_read();
  allocator_for(Device::cpu()).empty_cache();
}

// Per graph input but the backward's seed, where a call takes its tensor
// from. Bindings follow the traced input order, which the passes keep (they
// only append constants).
std::vector<CachedGraph::Binding> bind_inputs(const trace::Trace& traced,
                                              std::optional<trace::ValueId> seed,
                                              const std::vector<Leaf>& leaves) {
  std::vector<CachedGraph::Binding> bindings;
  size_t data = 0, state = 0;
  for (const trace::GraphInput& input : traced.graph.inputs) {
    if (seed && input.value == *seed) continue;
    if (input.kind == trace::InputKind::kData) {
      bindings.push_back({CachedGraph::Binding::kData, data++, Tensor()});
      continue;
    }
    const Tensor& handle = traced.state[state++];
    // A gradient read by the step (accumulation across calls): read the
    // parameter's gradient afresh on each call, not this old tensor.
    const Leaf* owner = nullptr;
    for (const Leaf& leaf : leaves) {
      if (leaf.grad_before.defined() && leaf.grad_before.impl_ptr() == handle.impl_ptr()) {
        owner = &leaf;
      }
    }
    if (owner != nullptr) {
      bindings.push_back({CachedGraph::Binding::kGradOf, 0, owner->parameter});
    } else {
      bindings.push_back({CachedGraph::Binding::kState, 0, handle});
    }
  }
  return bindings;
}

// One call traced, before its graph is optimized: the graph, and how a
// replay feeds it and applies its results.
struct Recording {
  trace::Graph graph;
  std::vector<Tensor> state;  // The tensor of each state input, in order.
  size_t num_user_outputs = 0;
  std::vector<CachedGraph::Binding> bindings;
  std::vector<trace::StateWrite> state_writes;
  std::vector<CachedGraph::GradWrite> grad_writes;
  std::optional<TracedBackward> backward;
  int seed_input = -1;  // With `backward`: which graph input its seed is.
  // The state the call started from: each captured tensor with its data
  // when captured, each captured parameter with its gradient then.
  std::vector<std::pair<Tensor, Tensor>> captured;
  std::vector<Leaf> leaves;
};

// Tensors' data and parameters' gradients at one moment, to go back to.
class StateCopy {
 public:
  // Remembers that `tensor` is to hold `data` (the first word on a tensor wins).
  void keep(const Tensor& tensor, Tensor data) {
    if (kept_.insert(tensor.impl_ptr().get()).second) data_.emplace_back(tensor, std::move(data));
  }
  // Remembers that `parameter`'s gradient is to be `grad` (ditto).
  void keep_grad(const Tensor& parameter, Tensor grad) {
    if (kept_grads_.insert(parameter.impl_ptr().get()).second) {
      grads_.emplace_back(parameter, std::move(grad));
    }
  }
  void restore() const {
    for (const auto& [tensor, data] : data_) tensor.assign_(data);
    for (const auto& [parameter, grad] : grads_) {
      if (AutogradMeta* meta = leaf_meta(parameter)) meta->grad = grad;
    }
  }

 private:
  absl::flat_hash_set<const TensorImpl*> kept_, kept_grads_;
  std::vector<std::pair<Tensor, Tensor>> data_, grads_;
};

}  // namespace

struct HybridFunction::Impl {
  Fn fn;
  HybridizeOptions options;
  // Held for a whole call: see Note [Calls from several threads].
  std::mutex mutex;
  Stats stats;
  std::atomic<int64_t> eager_calls{0};  // Stats::eager, counted without the mutex.
  // Most recently used first.
  std::list<CachedGraph> cache;
  absl::flat_hash_map<std::string, std::list<CachedGraph>::iterator> by_key;
  std::optional<Signature> last_traced;
  const trace::Executor* last_executor = nullptr;

  // Traces `fn` on `inputs` into a new cache entry (the most recent) and
  // sets `outputs` to the call's results; fits a family for the signature
  // when there are free dimensions.
  CachedGraph& trace(const std::vector<Tensor>& inputs, Signature signature,
                     std::vector<Tensor>* outputs);
  // Runs `fn` on `inputs` under a tracer; `outputs`: its results.
  Recording record(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs);
  // A new cache entry (the most recent) that replays `graph`, which is
  // `recording`'s graph or that graph instantiated at other sizes.
  CachedGraph& add_entry(const Recording& recording, trace::Graph graph, Signature signature,
                         Device device);
  // Optimizes the traced graph (cut into forward and backward when it holds
  // a traced backward) and builds the executors that replay it.
  void build_executors(CachedGraph& entry, trace::Graph graph,
                       const std::vector<trace::GraphInput>& forward_inputs,
                       std::optional<TracedBackward> backward, Device device);
  // Puts `entry` first in the cache, evicting beyond options.cache_size.
  CachedGraph& remember(CachedGraph entry);
  std::vector<Tensor> replay(CachedGraph& graph, const std::vector<Tensor>& inputs);
  void attach_backward(const CachedGraph& graph, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& call_inputs,
                       const std::vector<Tensor>& forward_outputs,
                       std::shared_ptr<absl::flat_hash_map<int64_t, int64_t>> seeds);
  std::vector<Tensor> verify(CachedGraph& graph, const std::vector<Tensor>& inputs);

  // Note [One trace for every size]
  // With HybridizeOptions::dynamic_dims, a trace is also traced at a few
  // other sizes and fitted into a family (eager/symbolic_trace.h): its graph
  // with every size an expression of the free dimensions. A later call
  // whose signature differs only in their sizes instantiates that graph
  // (trace/symbolic_shapes.h: attributes evaluated, every shape inferred
  // again and checked) and optimizes it as a trace's would be, without
  // running the function. Sizes the family cannot take (past a limit such
  // as seq <= max_len) fall back to a trace, whose eager run answers as
  // eager code does. Families live as long as the function.
  //
  // The other sizes are traced by running the whole call again on zeros,
  // and a training step updates parameters, optimizer state and gradients
  // as it runs. So each of those runs starts from the state the traced call
  // started from (so that it takes the same path: a first step sees no
  // gradients yet), and afterwards every tensor and gradient they touched
  // goes back to what the traced call left, with the random generator.
  // Tensors are restored by rebinding (assign_), which is how every update
  // is made; host-side state the function changes (a counter in C++) is
  // beyond reach, as it is for a replay (Note [What a trace cannot see]).
  struct Family {
    Signature signature;
    Recording example;     // The traced call, less its graph, state and prior state;
    SymbolicTrace fitted;  // its graph and state, fitted.
  };
  std::vector<Family> families;
  bool warned_about_dynamic_dims = false;

  // A new cache entry for `inputs` from a family, or null if none takes them.
  CachedGraph* instantiate(const std::vector<Tensor>& inputs, const Signature& signature);
  // Fits the family of `example` (a recording of a call on `inputs` that
  // started with the random state `random_before`), or warns once why not.
  void fit_family(Recording example, const Signature& signature, const std::vector<Tensor>& inputs,
                  uint64_t random_before);
};

namespace {

// Whether two signatures differ at most in their inputs' sizes.
bool same_but_sizes(const Signature& a, const Signature& b) {
  if (a.grad_mode != b.grad_mode || a.key != b.key || a.exact.size() != b.exact.size()) {
    return false;
  }
  for (size_t i = 0; i < a.exact.size(); ++i) {
    const Signature::Input& x = a.exact[i];
    const Signature::Input& y = b.exact[i];
    if (x.dtype != y.dtype || x.device != y.device || x.requires_grad != y.requires_grad ||
        x.shape.rank() != y.shape.rank()) {
      return false;
    }
  }
  return true;
}

}  // namespace

CachedGraph* HybridFunction::Impl::instantiate(const std::vector<Tensor>& inputs,
                                               const Signature& signature) {
  for (const Family& family : families) {
    if (!same_but_sizes(family.signature, signature)) continue;
    const SymbolicTrace& fitted = family.fitted;
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.shape());
    trace::Graph graph;
    try {
      const trace::SymbolValues sizes = trace::bind_symbols(fitted.graph, fitted.symbolic, shapes);
      graph = trace::instantiate(fitted.graph, fitted.symbolic, sizes, fitted.sources);
    } catch (const Error&) {
      continue;
    }
    return &add_entry(family.example, std::move(graph), signature, inputs[0].device());
  }
  return nullptr;
}

void HybridFunction::Impl::fit_family(Recording example, const Signature& signature,
                                      const std::vector<Tensor>& inputs, uint64_t random_before) {
  std::vector<InputExample> shapes;
  for (const Tensor& t : inputs) {
    shapes.push_back({t.shape(), t.dtype(), t.device(), t.requires_grad()});
  }
  // Note [One trace for every size]: where each run at other sizes starts,
  // and what comes back after them.
  StateCopy before, after;
  for (const auto& [tensor, data] : example.captured) {
    before.keep(tensor, data);
    after.keep(tensor, tensor.snapshot());
  }
  for (const trace::StateWrite& write : example.state_writes) {
    after.keep(write.target, write.target.snapshot());
  }
  for (const Leaf& leaf : example.leaves) {
    before.keep_grad(leaf.parameter, leaf.grad_before);
    after.keep_grad(leaf.parameter, leaf.parameter.grad());
  }
  const uint64_t random_after = random_state();
  absl::Cleanup put_back = [&] {
    after.restore();
    manual_seed(random_after);
  };
  auto trace_at = [&](const std::vector<Tensor>& probe_inputs) {
    before.restore();
    manual_seed(random_before);
    std::vector<Tensor> outputs;
    Recording probe = record(probe_inputs, &outputs);
    // The ops ran on zeros at sizes the model may refuse only at run time
    // (an index past a table): the failure belongs to this probe.
    for (const Tensor& output : outputs) output.wait_to_read();
    for (const trace::StateWrite& write : probe.state_writes) write.target.wait_to_read();
    for (const CachedGraph::GradWrite& write : probe.grad_writes) {
      if (const Tensor grad = write.parameter.grad(); grad.defined()) grad.wait_to_read();
    }
    // What this run touched that the traced call did not (a family then
    // fails to fit, as the two took different paths) held its data before.
    for (const auto& [tensor, data] : probe.captured) {
      before.keep(tensor, data);
      after.keep(tensor, data);
    }
    for (const Leaf& leaf : probe.leaves) {
      before.keep_grad(leaf.parameter, leaf.grad_before);
      after.keep_grad(leaf.parameter, leaf.grad_before);
    }
    return TracedCall{std::move(probe.graph), std::move(probe.state)};
  };
  try {
    SymbolicTrace fitted = fit_free_dims(
        trace_at, shapes, options.dynamic_dims, str_cat("hybridize '", options.name, "'"),
        TracedCall{std::move(example.graph), std::move(example.state)});
    // The state before the call is not needed again (and would keep the
    // parameters' old values alive).
    example.captured.clear();
    example.leaves.clear();
    families.push_back({signature, std::move(example), std::move(fitted)});
  } catch (const Error& e) {
    if (warned_about_dynamic_dims) return;
    warned_about_dynamic_dims = true;
    std::cerr << "tandem: warning: hybridize '" << options.name
              << "' traces once per shape despite dynamic_dims: " << e.what() << "\n";
  }
}

Recording HybridFunction::Impl::record(const std::vector<Tensor>& inputs,
                                       std::vector<Tensor>* outputs) {
  const bool differentiable = options.differentiable && grad_mode_enabled();
  Recording recording;
  const std::vector<Tensor> traced_inputs = trace_inputs(inputs, differentiable);
  trace::Tracer tracer;
  tracer.set_on_capture([&](const Tensor& t) {
    if (AutogradMeta* meta = leaf_meta(t)) recording.leaves.push_back({t, meta->grad});
    recording.captured.emplace_back(t, t.snapshot());
  });
  if (options.state_names) tracer.set_state_namer(state_namer(options.state_names()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    tracer.add_input(traced_inputs[i], str_cat("input", i));
  }
  *outputs = fn(traced_inputs);
  recording.num_user_outputs = outputs->size();
  for (size_t o = 0; o < outputs->size(); ++o) {
    TANDEM_CHECK((*outputs)[o].defined(),
                 "the hybridized function returned an undefined tensor as output ", o);
    tracer.add_output((*outputs)[o], str_cat("output", o));
  }
  if (differentiable && outputs->size() == 1 && (*outputs)[0].requires_grad()) {
    recording.backward =
        trace_backward(tracer, (*outputs)[0], inputs, traced_inputs, recording.leaves);
  } else {
    record_grad_writes(tracer, recording.leaves, recording.grad_writes);
  }
  trace::Trace traced = tracer.finish();
  std::optional<trace::ValueId> seed;
  if (recording.backward) {
    seed = recording.backward->seed;
    for (size_t i = 0; i < traced.graph.inputs.size(); ++i) {
      if (traced.graph.inputs[i].value == *seed) recording.seed_input = static_cast<int>(i);
    }
  }
  recording.bindings = bind_inputs(traced, seed, recording.leaves);
  recording.state_writes = std::move(traced.state_writes);
  recording.graph = std::move(traced.graph);
  recording.state = std::move(traced.state);
  return recording;
}

CachedGraph& HybridFunction::Impl::add_entry(const Recording& recording, trace::Graph graph,
                                             Signature signature, Device device) {
  CachedGraph entry;
  entry.num_user_outputs = recording.num_user_outputs;
  entry.bindings = recording.bindings;
  entry.state_writes = recording.state_writes;
  entry.grad_writes = recording.grad_writes;
  // The forward graph's inputs: all but the seed, which is the backward's.
  std::optional<TracedBackward> backward = recording.backward;
  std::vector<trace::GraphInput> forward_inputs;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    if (static_cast<int>(i) == recording.seed_input) {
      backward->seed = graph.inputs[i].value;  // Its number in this graph.
    } else {
      forward_inputs.push_back(graph.inputs[i]);
    }
  }
  build_executors(entry, std::move(graph), forward_inputs, std::move(backward), device);
  entry.verify_left = options.verify ? options.verify_calls : 0;
  entry.signature = std::move(signature);
  entry.key_text = entry.signature.text();
  return remember(std::move(entry));
}

CachedGraph& HybridFunction::Impl::trace(const std::vector<Tensor>& inputs, Signature signature,
                                         std::vector<Tensor>* outputs) {
  const uint64_t random_before = random_state();
  Recording recording = record(inputs, outputs);
  const Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  release_cache_after_trace(*outputs, recording.state_writes, device);
  std::optional<Recording> example;
  if (!options.dynamic_dims.empty() && !inputs.empty()) example = recording;
  trace::Graph graph = std::move(recording.graph);
  CachedGraph& result = add_entry(recording, std::move(graph), std::move(signature), device);
  if (result.backward) {
    // The trace's own results carry a spent autograd graph (its backward was
    // traced): undo its state updates and random draws, and replay, so the
    // caller gets outputs it can differentiate.
    for (auto& [tensor, before] : recording.captured) tensor.assign_(before);
    manual_seed(random_before);
    *outputs = replay(result, inputs);
  }
  if (example) fit_family(std::move(*example), result.signature, inputs, random_before);
  return result;
}

void HybridFunction::Impl::build_executors(CachedGraph& entry, trace::Graph graph,
                                           const std::vector<trace::GraphInput>& forward_inputs,
                                           std::optional<TracedBackward> backward, Device device) {
  const trace::ExecutorOptions executor_options{
      .device = device, .plan_memory = options.plan_memory, .cuda_graph = options.cuda_graph};
  auto build = [&](trace::Graph g, const std::string& suffix) {
    if (options.optimize) {
      trace::optimize(g, {.inference = options.inference, .name = options.name + suffix});
    }
    return std::make_unique<trace::Executor>(std::move(g), executor_options);
  };
  if (!backward) {
    entry.executor = build(std::move(graph), "");
    return;
  }
  ForwardBackward cut =
      cut_forward_backward(graph, backward->seed, backward->grad_outputs, forward_inputs,
                           entry.state_writes, backward->backward);
  entry.executor = build(std::move(cut.forward), ".forward");
  backward->backward.executor = build(std::move(cut.backward), ".backward");
  entry.backward = std::move(backward->backward);
}

CachedGraph& HybridFunction::Impl::remember(CachedGraph entry) {
  cache.push_front(std::move(entry));
  by_key[cache.front().key_text] = cache.begin();
  // Least recently used first out.
  while (static_cast<int>(cache.size()) > std::max(1, options.cache_size)) {
    by_key.erase(cache.back().key_text);
    cache.pop_back();
  }
  return cache.front();
}

std::vector<Tensor> HybridFunction::Impl::replay(CachedGraph& graph,
                                                 const std::vector<Tensor>& inputs) {
  std::vector<Tensor> call_inputs;
  call_inputs.reserve(graph.bindings.size());
  for (const CachedGraph::Binding& b : graph.bindings) {
    switch (b.kind) {
      case CachedGraph::Binding::kData:
        call_inputs.push_back(inputs[b.data_index]);
        break;
      case CachedGraph::Binding::kState:
        call_inputs.push_back(b.handle);
        break;
      case CachedGraph::Binding::kGradOf: {
        Tensor grad = b.handle.grad();
        TANDEM_CHECK(grad.defined(), "the traced code added to a parameter's existing gradient, ",
                     "but now the parameter has none; clear gradients the same way on every call ",
                     "(e.g. zero_grad() inside the hybridized step)");
        call_inputs.push_back(std::move(grad));
        break;
      }
    }
  }
  // Random nodes draw fresh seeds; a backward graph reuses this call's.
  // Nodes traced with one seed drew the same numbers when traced (a fused
  // attention and the backward that redraws its dropout), so they share
  // one fresh seed, drawn once, as the eager call drew it once.
  auto seeds = std::make_shared<absl::flat_hash_map<int64_t, int64_t>>();
  std::vector<Tensor> outputs = graph.executor->run(call_inputs, [&seeds](int64_t traced) {
    const auto [it, first] = seeds->try_emplace(traced, 0);
    if (first) it->second = static_cast<int64_t>(next_seed());
    return it->second;
  });
  for (const trace::StateWrite& write : graph.state_writes) {
    write.target.assign_(outputs[static_cast<size_t>(write.output)]);
  }
  for (const CachedGraph::GradWrite& write : graph.grad_writes) {
    AutogradMeta* meta = leaf_meta(write.parameter);
    TANDEM_INTERNAL_ASSERT(meta != nullptr, "a traced parameter lost its autograd state");
    meta->grad = write.output >= 0 ? outputs[static_cast<size_t>(write.output)] : Tensor();
  }
  if (graph.backward) attach_backward(graph, inputs, call_inputs, outputs, seeds);
  outputs.resize(graph.num_user_outputs);
  return outputs;
}

// Note [Differentiable replay]
// A hybridized module called with gradients enabled traces its forward and,
// with the output's gradient as a graph input, its backward, into one graph,
// then cuts it in two: the forward (outputs, state updates, and the values
// the backward reads) and the backward (parameter and input gradients). A
// replay runs the forward and gives its output one autograd node, whose
// gradient function runs the backward graph; so loss.backward() later flows
// through the replayed block like through any op, as in Gluon's CachedOp.
void HybridFunction::Impl::attach_backward(
    const CachedGraph& graph, const std::vector<Tensor>& inputs,
    const std::vector<Tensor>& call_inputs, const std::vector<Tensor>& forward_outputs,
    std::shared_ptr<absl::flat_hash_map<int64_t, int64_t>> seeds) {
  const CachedGraph::Backward& b = *graph.backward;
  auto node = std::make_shared<AutogradNode>();
  node->name = options.name;
  node->where = current_call_site().where;
  auto add_input = [&](const Tensor& t) {
    node->inputs.push_back(t.snapshot());
    node->edges.push_back(AutogradNode::edge_to(t));
  };
  for (size_t i : b.data_inputs) add_input(inputs[i]);
  for (const Tensor& p : b.parameters) add_input(p);
  const Tensor& y = forward_outputs[0];
  node->outputs.push_back(y.snapshot());
  node->num_outputs = 1;

  // What the backward graph reads, fixed now: this call's inputs and saved values.
  std::vector<Tensor> backward_inputs;
  for (int source : b.source) {
    if (source >= 0) {
      backward_inputs.push_back(call_inputs[static_cast<size_t>(source)].snapshot());
    } else if (source == CachedGraph::Backward::kSeed) {
      backward_inputs.emplace_back();  // Filled by the gradient.
    } else {
      backward_inputs.push_back(
          forward_outputs[static_cast<size_t>(CachedGraph::Backward::kSaved - source)]);
    }
  }
  node->backward = [executor = b.executor, backward_inputs = std::move(backward_inputs),
                    source = b.source, grad_output = b.grad_output,
                    seeds](absl::Span<const Tensor> grad_outputs) mutable {
    for (size_t k = 0; k < source.size(); ++k) {
      if (source[k] == CachedGraph::Backward::kSeed) backward_inputs[k] = grad_outputs[0];
    }
    std::vector<Tensor> grads = executor->run(backward_inputs, [&](int64_t traced) {
      auto it = seeds->find(traced);
      return it != seeds->end() ? it->second : static_cast<int64_t>(next_seed());
    });
    std::vector<Tensor> result;
    for (int index : grad_output)
      result.push_back(index >= 0 ? grads[static_cast<size_t>(index)] : Tensor());
    return result;
  };
  auto meta = std::make_shared<AutogradMeta>();
  meta->grad_fn = std::move(node);
  forward_outputs[0].impl_ptr()->autograd = std::move(meta);
}

// Runs the graph, then (from the same starting state) the function eagerly,
// and compares everything the call produces.
std::vector<Tensor> HybridFunction::Impl::verify(CachedGraph& graph,
                                                 const std::vector<Tensor>& inputs) {
  // Save what either run changes: rebound state, gradients, the generator.
  std::vector<Tensor> targets_before;
  for (const trace::StateWrite& w : graph.state_writes)
    targets_before.push_back(w.target.snapshot());
  std::vector<Tensor> grads_before;
  for (const CachedGraph::GradWrite& w : graph.grad_writes)
    grads_before.push_back(w.parameter.grad());
  const uint64_t seed_state = random_state();

  std::vector<Tensor> graph_outputs = replay(graph, inputs);
  std::vector<Tensor> graph_state, graph_grads;
  for (const trace::StateWrite& w : graph.state_writes) graph_state.push_back(w.target.snapshot());
  for (const CachedGraph::GradWrite& w : graph.grad_writes)
    graph_grads.push_back(w.parameter.grad());

  for (size_t i = 0; i < graph.state_writes.size(); ++i)
    graph.state_writes[i].target.assign_(targets_before[i]);
  for (size_t i = 0; i < graph.grad_writes.size(); ++i)
    leaf_meta(graph.grad_writes[i].parameter)->grad = grads_before[i];
  manual_seed(seed_state);
  std::vector<Tensor> eager_outputs = fn(inputs);

  const trace::Graph& g = graph.executor->graph();
  auto compare = [&](const Tensor& from_graph, const Tensor& from_eager, size_t output,
                     const std::string& what) {
    const trace::ValueId id = g.outputs[output].value;
    const trace::Value& v = g.value(id);
    std::string made_by = "a graph input";
    std::source_location where;
    if (v.node >= 0) {
      const trace::Node& node = g.nodes[static_cast<size_t>(v.node)];
      made_by = str_cat("node ", v.node, " (", node.op->name, ")");
      where = node.where;
    }
    if (from_graph.defined() != from_eager.defined() ||
        (from_graph.defined() && from_graph.shape() != from_eager.shape())) {
      throw Error(
          str_cat("hybridize verify: ", what,
                  " differs in shape or presence between the graph and eager runs; made by ",
                  made_by),
          "hybridize", where);
    }
    if (!from_graph.defined()) return;
    std::vector<double> a = values_of(from_graph), b = values_of(from_eager);
    for (size_t i = 0; i < a.size(); ++i) {
      const double tolerance = options.verify_atol + options.verify_rtol * std::abs(b[i]);
      if (!(std::abs(a[i] - b[i]) <= tolerance) && !(std::isnan(a[i]) && std::isnan(b[i]))) {
        throw Error(str_cat("hybridize verify: ", what, " differs at element ", i, ": graph ", a[i],
                            ", eager ", b[i], "; the value was made by ", made_by,
                            ", traced at the line shown"),
                    "hybridize", where);
      }
    }
  };
  TANDEM_CHECK(eager_outputs.size() == graph_outputs.size(),
               "hybridize verify: the function returned ", eager_outputs.size(),
               " outputs, the trace ", graph_outputs.size());
  for (size_t o = 0; o < graph_outputs.size(); ++o)
    compare(graph_outputs[o], eager_outputs[o], o, str_cat("output ", o));
  for (size_t i = 0; i < graph.state_writes.size(); ++i) {
    compare(graph_state[i], graph.state_writes[i].target,
            static_cast<size_t>(graph.state_writes[i].output), str_cat("updated state ", i));
  }
  for (size_t i = 0; i < graph.grad_writes.size(); ++i) {
    if (graph.grad_writes[i].output < 0) continue;
    compare(graph_grads[i], graph.grad_writes[i].parameter.grad(),
            static_cast<size_t>(graph.grad_writes[i].output), str_cat("gradient ", i));
  }
  return eager_outputs;
}

HybridFunction::HybridFunction(Fn fn, HybridizeOptions options) : impl_(std::make_unique<Impl>()) {
  TANDEM_CHECK(fn != nullptr, "hybridize: the function is empty");
  impl_->fn = std::move(fn);
  impl_->options = std::move(options);
}

HybridFunction::~HybridFunction() = default;
HybridFunction::HybridFunction(HybridFunction&&) noexcept = default;
HybridFunction& HybridFunction::operator=(HybridFunction&&) noexcept = default;

// Note [Calls from several threads]
// A call reads and changes the cache (a lookup moves its entry to the front,
// a trace adds one and may evict another that a concurrent replay still
// runs), so calls hold the function's mutex from lookup to return: calls
// from several threads are safe and take turns. A replay only pushes work
// to the engine, so the turn is short; a trace holds it while the function
// runs eagerly. The call inside a trace that runs the function eagerly (a
// hybridized block inside a hybridized step) happens on the tracing thread,
// which holds the mutex of the outer function only; it takes no lock here
// (two functions each tracing a call of the other would deadlock) and
// touches nothing of this function's but an atomic counter.
std::vector<Tensor> HybridFunction::operator()(const std::vector<Tensor>& inputs, int64_t key,
                                               std::source_location where) {
  Impl& s = *impl_;
  CallSiteScope site(s.options.name.c_str(), where);
  if (trace::Tracer::active()) {  // Inside another trace: be part of it.
    s.eager_calls.fetch_add(1, std::memory_order_relaxed);
    return s.fn(inputs);
  }
  std::lock_guard turn(s.mutex);
  // `count`: the Stats counter this call adds to.
  auto replay = [&](CachedGraph& graph, int64_t& count) {
    ++count;
    s.last_executor = graph.executor.get();
    if (graph.verify_left > 0) {
      --graph.verify_left;
      return s.verify(graph, inputs);
    }
    return s.replay(graph, inputs);
  };
  // A call like the last one replays the most recently used graph without
  // formatting its signature (a loop's calls, batch-1 inference).
  if (!s.cache.empty() && s.cache.front().signature.matches(inputs, grad_mode_enabled(), key)) {
    return replay(s.cache.front(), s.stats.replays);
  }
  Signature signature = signature_of(inputs, key);
  std::string key_text = signature.text();
  auto found = s.by_key.find(key_text);
  if (found != s.by_key.end()) {
    s.cache.splice(s.cache.begin(), s.cache, found->second);  // Most recently used.
    return replay(s.cache.front(), s.stats.replays);
  }

  if (!s.families.empty() && !inputs.empty()) {
    if (CachedGraph* entry = s.instantiate(inputs, signature)) {
      return replay(*entry, s.stats.instantiations);
    }
  }

  const Signature* closest = nullptr;
  for (const CachedGraph& cached : s.cache) {
    if (closest == nullptr ||
        distance(cached.signature, signature) < distance(*closest, signature)) {
      closest = &cached.signature;
    }
  }
  if (closest == nullptr && s.last_traced) closest = &*s.last_traced;
  std::string reason = retrace_reason(closest, signature);
  TANDEM_CHECK(!(s.options.strict && s.stats.traces > 0),
               "strict hybridize: would trace again because ", reason,
               " (set strict = false to allow retracing)");
  ++s.stats.traces;
  s.stats.last_trace_reason = reason;
  if (s.options.warn_after_traces > 0 && s.stats.traces == s.options.warn_after_traces) {
    std::cerr << "tandem: warning: hybridize '" << s.options.name << "' has traced "
              << s.stats.traces << " times, the last because " << reason
              << "; inputs whose shapes change on every call defeat the graph cache (pad to "
              << "fixed shapes, or set strict = true to find the caller)\n";
  }
  s.last_traced = signature;
  std::vector<Tensor> outputs;
  CachedGraph& graph = s.trace(inputs, std::move(signature), &outputs);
  s.last_executor = graph.executor.get();
  return outputs;
}

const HybridFunction::Stats& HybridFunction::stats() const {
  impl_->stats.eager = impl_->eager_calls.load(std::memory_order_relaxed);
  return impl_->stats;
}
const trace::Executor* HybridFunction::last_executor() const { return impl_->last_executor; }
const HybridizeOptions& HybridFunction::options() const { return impl_->options; }

void HybridFunction::export_model(const std::string& path,
                                  absl::Span<const std::pair<std::string, Tensor>> names,
                                  const ExportOptions& options) const {
  Impl& s = *impl_;
  std::lock_guard turn(s.mutex);
  TANDEM_CHECK(!s.cache.empty(), "export_model('", path, "'): '", s.options.name,
               "' has not been called yet; call it once so that there is a graph to export");
  const CachedGraph& graph = s.cache.front();
  TANDEM_CHECK(graph.state_writes.empty() && graph.grad_writes.empty() && !graph.backward,
               "export_model('", path, "'): the graph of '", s.options.name,
               "' updates state or computes gradients, which a loaded model cannot do; export ",
               "an inference function (call it under NoGradGuard, modules in eval mode)");
  // The export traces afresh, without the passes, at the example's shapes
  // and, for free dimensions, at the few others that fit its sizes
  // (eager/symbolic_trace.h); the loader optimizes for the sizes it runs.
  std::vector<InputExample> example;
  for (const Signature::Input& input : graph.signature.exact) {
    example.push_back({input.shape, input.dtype, input.device});
  }
  FreeDims free = options.dynamic_dims;
  if (free.empty() && options.dynamic_batch) {
    for (size_t i = 0; i < example.size(); ++i) {
      if (example[i].shape.rank() > 0) free[str_cat("input", i)] = {{0, "batch"}};
    }
  }
  const bool onnx = options.format == ExportOptions::Format::kOnnx;
  const std::string what = str_cat(onnx ? "export_onnx('" : "export_model('", path, "')");
  // The inference the graph computes, run eagerly, leaving the generator as
  // it was.
  auto eager = [&](const std::vector<Tensor>& inputs) {
    NoGradGuard no_grad;
    const uint64_t random = random_state();
    std::vector<Tensor> outputs = s.fn(inputs);
    manual_seed(random);
    return outputs;
  };
  SymbolicTrace traced;
  try {
    traced = trace_symbolic(eager, example, free, what);
  } catch (const Error& e) {
    throw Error(
        str_cat(e.message(), options.dynamic_dims.empty() && !free.empty()
                                 ? "; export with ExportOptions{.dynamic_batch = false} to fix the "
                                   "batch size"
                                 : ""));
  }
  // A state input is named by the tensor whose data it is.
  std::vector<serialization::StateInput> state;
  for (const Tensor& tensor : traced.state) {
    std::string name = str_cat("state", state.size());
    for (const auto& [candidate, named] : names) {
      if (same_data(named, tensor)) name = candidate;
    }
    state.push_back({std::move(name), tensor,
                     tensor.requires_grad() ? serialization::InputRole::kParameter
                                            : serialization::InputRole::kBuffer});
  }
  auto write = [&](const std::string& to) {
    if (onnx) {
      serialization::export_onnx(to, traced.graph, state, traced.symbolic, traced.sources, what);
    } else {
      serialization::export_graph(to, traced.graph, state, traced.symbolic);
    }
  };
  if (options.check) {
    std::vector<std::vector<Shape>> other_shapes;
    if (traced.plan.points.size() > 1) {
      // The first check point: near the example, where the model runs.
      other_shapes.push_back(
          shapes_at(traced, traced.plan.points[traced.plan.first_extra_check() - 1]));
    }
    std::function<LoadedModel(const std::string&)> read;
    if (onnx) read = [](const std::string& trial) { return import_onnx(trial); };
    check_export(write, traced.graph, eager, what, other_shapes, read);
  }
  write(path);
}

void HybridFunction::export_onnx(const std::string& path,
                                 absl::Span<const std::pair<std::string, Tensor>> names,
                                 ExportOptions options) const {
  options.format = ExportOptions::Format::kOnnx;
  export_model(path, names, options);
}

HybridFunction hybridize(HybridFunction::Fn fn, HybridizeOptions options) {
  return HybridFunction(std::move(fn), std::move(options));
}

}  // namespace tandem
