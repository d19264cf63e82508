// nn::Module: the base of every layer and model, like torch::nn::Module or a
// Gluon Block. A module owns named parameters (tensors that learn), named
// buffers (state that does not learn, e.g. BatchNorm's running statistics)
// and named child modules.
//
//   struct Mlp : tandem::nn::Module {
//     Mlp() {
//       fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 128));
//       fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, 10));
//     }
//     std::string type_name() const override { return "Mlp"; }
//     Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
//     std::shared_ptr<nn::Linear> fc1, fc2;
//   };
//
//   auto net = std::make_shared<Mlp>();
//   net->named_parameters();   // "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"
//   optim::SGD opt(net->parameters(), 0.1);
//   net->save("mlp.tsd");      // keys are the same dotted names
//
// Note [Parameter names are the one mapping]
// The name given at register_parameter / register_buffer / register_module is
// the only name a tensor has: the dotted path of names from the root
// ("features.0.weight") is its state_dict and checkpoint key (and, later, its
// name in an exported graph). Names may not be empty or contain '.', and a
// module's parameters, buffers and children share one namespace.
//
// Note [Handles and in-place updates]
// Tensor is a handle on shared state (core/tensor.h). register_parameter keeps
// the very handle it returns, so the member a layer keeps (`weight_`) and the
// entry in parameters() are the same tensor. Updates never write into a
// tensor's memory; they rebind it with Tensor::assign_ (optimizers, the
// initializers of init.h, load_state_dict, BatchNorm's running statistics), and
// every copy of the handle sees the new value. A tensor obtained from
// state_dict() is a detached handle: a snapshot that later updates do not
// change.
//
// Note [Moving a module between devices]
// to(device) moves a module's tensors the way an update does: it rebinds each
// handle (move_to_ in eager/ops.h, assign_ across devices) rather than
// registering new tensors. So, after `net->to(Device::cuda())`:
//  * a layer's member, parameters() and state_dict() keys are unchanged and
//    now refer to the copies on the GPU; a parameter is still a leaf with its
//    requires_grad, and a gradient it had accumulated moves too;
//  * an optimizer made before holds the same handles and updates the moved
//    parameters; its state (momentum, Adam's moments) follows them at its
//    next step(). Making the optimizer after to(), as PyTorch advises, saves
//    that one copy and is the recommended order;
//  * a hybridized module forgets its traced graphs and traces again at its
//    next call (the graphs were built for the old device);
//  * snapshots taken before (state_dict()) stay where they were.
// The copies are to_device ops like any other: to() returns at once. It may
// not be called while a function is being traced.
//
// Lifetime: modules are held by std::shared_ptr (children are shared, so a
// module may appear in two parents, e.g. for weight tying). Modules can be
// moved, not copied.
//
// Threads: one thread builds and trains a module at a time (registration,
// train(), to(), load_state_dict, backward() into its parameters and
// optimizers are not synchronized). Inference calls, operator() (hybridized
// or not) or forward() in eval mode under a NoGradGuard, may come from
// several threads at once, as when serving, as long as nothing changes the
// module meanwhile: a hybridized module's calls take turns on its graph
// cache (eager/hybridize.h), and hybridize() and export_model() take turns
// with them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

#include "core/error.h"
#include "core/tensor.h"
#include "eager/hybridize.h"
#include "eager/nn/state_dict.h"

namespace tandem::nn {

// (name, tensor) pairs in registration order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  // ---- What a subclass defines. ----

  // The computation, for modules with one input and one output (every layer
  // here; Sequential chains them). The default throws tandem::Error: a module
  // with other inputs defines its own methods instead.
  virtual Tensor forward(const Tensor& x);
  // forward(x), or its traced graph once hybridize() was called. Call child
  // modules this way: the call names the child in the module path that
  // traced nodes and errors carry ("features.0"), and the ops of Tandem's own
  // layers report `where`, the caller's line (Note [Name scopes] in
  // core/error.h). forward(x) runs the same computation without either.
  Tensor operator()(const Tensor& x, std::source_location where = std::source_location::current());

  // The class name shown by to_string(), e.g. "Linear".
  virtual std::string type_name() const { return "Module"; }
  // The options shown inside the parentheses by to_string(), e.g.
  // "in_features=4, out_features=2, bias=true". Empty by default.
  virtual std::string extra_repr() const { return {}; }

  // ---- Registration (call from the subclass's constructor). ----

  // Adds a parameter and returns the handle the module keeps (see Note
  // [Handles and in-place updates]); marks it requires_grad_(requires_grad).
  // A tensor that is the result of an op is detached first, so the handle
  // returned may differ from `tensor`: keep the returned one. Throws
  // tandem::Error for an undefined tensor, a non-floating dtype, or a bad or
  // duplicate name (Note [Parameter names are the one mapping]).
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);

  // Adds state that is saved and loaded with the parameters but not trained
  // (no gradient): e.g. running statistics. Returns the kept handle.
  Tensor register_buffer(const std::string& name, Tensor tensor);

  // Keeps `tensor` as a constant of this module: used by forward() but
  // neither trained nor saved (a bias-free layer's zero bias, a non-affine
  // norm's ones and zeros), so it is in none of the lists below; to() moves
  // it with the parameters. Returns the kept handle.
  Tensor register_constant(Tensor tensor);

  // Adds a child; its parameters appear under "name.". Returns `module`.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- Walking the tree. Order: a module's own entries in registration
  // order, then each child's, depth-first; the same every run. ----

  // Parameters as dotted names, e.g. "features.0.weight". A tensor reachable
  // under two names (a shared child) appears once, under its first name.
  NamedTensors named_parameters() const;
  // The tensors of named_parameters(): what an optimizer takes.
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> buffers() const;
  // The direct children, in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;

  // Number of elements over all parameters().
  int64_t num_parameters() const;

  // ---- Devices. ----

  // Moves every parameter, buffer and constant of this module and its
  // descendants to `device` (a tensor shared by two modules moves once) and
  // returns *this, like PyTorch's module.to(device):
  //
  //   auto net = std::make_shared<Mlp>();
  //   net->to(Device::cuda());                 // before making the optimizer
  //   optim::SGD opt(net->parameters(), 0.1);
  //   Tensor y = (*net)(x.to(Device::cuda()));
  //
  // See Note [Moving a module between devices]. Throws tandem::Error when
  // `device` does not exist on this machine (e.g. cuda:0 without a GPU) or
  // while a function is being traced; nothing has moved then.
  Module& to(Device device);

  // ---- Modes and gradients. ----

  // Sets training mode on this module and every descendant (Dropout and
  // BatchNorm behave differently in each). Modules start in training mode.
  void train(bool on = true);
  // train(false).
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Clears the accumulated gradient of every parameter.
  void zero_grad();

  // ---- Checkpoints (format in state_dict.h). ----

  // Every parameter and buffer under its dotted name, as detached handles (a
  // snapshot; see Note [Handles and in-place updates]). Unlike
  // named_parameters(), a shared tensor appears under each of its names.
  StateDict state_dict() const;

  // Replaces parameters and buffers with the tensors of `state` (shared, not
  // copied). Throws tandem::Error naming the keys when `state` lacks a key of
  // state_dict() or has one it does not know (unless `strict` is false, which
  // ignores both), or naming the key and both shapes/dtypes on a mismatch.
  // Nothing is changed when it throws. Values on another device are copied
  // to the device of the tensor they replace (a CPU checkpoint loads into a
  // model on the GPU).
  void load_state_dict(const StateDict& state, bool strict = true);

  // write_state_dict(path, state_dict()) and
  // load_state_dict(read_state_dict(path)).
  void save(const std::string& path) const;
  void load(const std::string& path, bool strict = true);

  // ---- Hybridize (eager/hybridize.h). ----

  // From now on, operator() traces forward once per input signature and
  // training flag, optimizes the graph and replays it (like Gluon's
  // HybridBlock.hybridize). hybridize(false) goes back to eager calls. With
  // gradients enabled the backward is traced too, and a later backward()
  // flows through the replayed graph into the parameters and the input
  // (Note [Differentiable replay] in eager/hybridize.cc). A whole training
  // step can also be hybridized at once with tandem::hybridize.
  void hybridize(bool on = true, HybridizeOptions options = {});
  bool is_hybridized() const { return hybrid_.on; }
  // The hybridized forward, for its statistics and graphs; null until the
  // first hybridized call.
  const HybridFunction* hybrid_forward() const { return hybrid_.function.get(); }

  // Writes the model's inference graph and weights as `path`.json and
  // `path`.<checksum>.params, for tandem::load (serialization/model.h) in a program
  // without this code. Needs hybridize() and one call since, whose input
  // shape the export traces at (dimension 0 stays free unless options say
  // otherwise). The model must be on the CPU (to(Device::cpu()) first; a
  // loaded model runs on the CPU). The trace runs in eval mode without gradients, so batch norm
  // uses its running statistics and folds into the convolution before it;
  // the module's mode is restored afterwards. Parameters and buffers keep
  // their state_dict names.
  void export_model(const std::string& path, const ExportOptions& options = {});
  // The same as one ONNX file at `path`, for other runtimes
  // (serialization/onnx_export.h); checked by reading it back with
  // tandem::import_onnx, as export_model checks with tandem::load.
  void export_onnx(const std::string& path, ExportOptions options = {});

  // A multi-line summary in PyTorch's style:
  //   Sequential(
  //     (0): Linear(in_features=2, out_features=8, bias=true)
  //     (1): ReLU()
  //   )
  std::string to_string() const;

 protected:
  // What operator() does around forward(x), for a module's own methods with
  // other arguments (MultiheadAttention's query, key, value and masks): while
  // a CallScope lives, this module is the caller that names the children it
  // calls, and ops report its path ("encoder.layers.0.self_attn") and `where`.
  // Such a method is not hybridized on its own (operator() is); inside a
  // hybridized parent it is traced with the parent.
  //
  //   Tensor Attention::forward(const Tensor& q, const Tensor& k, std::source_location where) {
  //     CallScope call(*this, where);
  //     return (*proj_)(q) ...;
  //   }
  class CallScope {
   public:
    CallScope(const Module& module, const std::source_location& where);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    NameScope name_;
    const Module* outer_;
  };

  // The line that called the innermost module (the user's line, for a layer
  // called as `(*fc1)(x)`), or `fallback` when no module call is open: what
  // Tandem's own layers pass to the ops they call.
  static std::source_location call_site(
      std::source_location fallback = std::source_location::current());

 private:
  // forward(x), with this module as the caller of the modules it calls.
  Tensor forward_as_caller(const Tensor& x);
  // This module's name among `caller`'s children ("" if it has none there).
  std::string name_in(const Module* caller) const;
  void check_new_name(const std::string& name, const char* what) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool params, bool buffers, bool dedup, NamedTensors& out,
               absl::flat_hash_set<const void*>& seen) const;
  std::string to_string_indented(int indent) const;
  void move_to(Device device, absl::flat_hash_set<const void*>& seen);

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<Tensor> constants_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;

  // The traced forward. Its function refers to this module, so a moved
  // module starts a new one (at its next call) instead of keeping it.
  struct HybridState {
    // Serializes operator(), hybridize() and export_model(), which read and
    // replace what follows. Recursive: a module called inside its own
    // forward (rare, but legal eagerly) must not wait for itself.
    std::unique_ptr<std::recursive_mutex> mutex = std::make_unique<std::recursive_mutex>();
    bool on = false;
    HybridizeOptions options;
    std::unique_ptr<HybridFunction> function;
    // The shape and dtype of the last hybridized call's input (export traces there).
    Shape last_input_shape;
    DType last_input_dtype = DType::kFloat32;
    Device last_input_device;
    std::source_location last_call_site;
    bool called = false;
    HybridState() = default;
    HybridState(HybridState&& other) noexcept : on(other.on), options(std::move(other.options)) {}
    HybridState& operator=(HybridState&& other) noexcept {
      on = other.on;
      options = std::move(other.options);
      function.reset();
      called = false;
      return *this;
    }
  };
  HybridState hybrid_;
};

}  // namespace tandem::nn
