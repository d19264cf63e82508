#include "eager/nn/module.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_join.h"

#include "core/error.h"
#include "core/tensor_observer.h"
#include "eager/autograd.h"
#include "eager/ops.h"

namespace tandem::nn {
namespace {

bool is_leaf(const Tensor& t) {
  const auto& meta = t.impl_ptr()->autograd;
  return meta == nullptr || meta->grad_fn == nullptr;
}

std::string describe(const Tensor& t) {
  return str_cat(dtype_name(t.dtype()), t.shape().to_string());
}

// The module whose forward this thread is running (through operator() or a
// hybridized trace), whose children name the modules it calls.
thread_local const Module* calling_module = nullptr;

}  // namespace

Tensor Module::forward(const Tensor&) {
  throw Error(str_cat(type_name(), " has no single-input forward(); call its own methods"));
}

Tensor Module::forward_as_caller(const Tensor& x) {
  const Module* outer = std::exchange(calling_module, this);
  absl::Cleanup restore = [&] { calling_module = outer; };
  return forward(x);
}

Module::CallScope::CallScope(const Module& module, const std::source_location& where)
    : name_(module.name_in(calling_module), where),
      outer_(std::exchange(calling_module, &module)) {}

Module::CallScope::~CallScope() { calling_module = outer_; }

std::string Module::name_in(const Module* caller) const {
  if (caller == nullptr) return {};
  for (const auto& [name, child] : caller->children_) {
    if (child.get() == this) return name;
  }
  return {};
}

std::source_location Module::call_site(std::source_location fallback) {
  return innermost_scope_site(fallback);
}

Tensor Module::operator()(const Tensor& x, std::source_location where) {
  NameScope scope(name_in(calling_module), where);
  std::unique_lock turn(*hybrid_.mutex);
  if (!hybrid_.on) {
    turn.unlock();
    return forward_as_caller(x);
  }
  if (!hybrid_.function) {
    HybridizeOptions options = hybrid_.options;
    if (options.name == HybridizeOptions().name) options.name = type_name();
    options.differentiable = true;  // Gradients flow through the replayed graph.
    hybrid_.function = std::make_unique<HybridFunction>(
        [this](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{forward_as_caller(in[0])};
        },
        std::move(options));
  }
  hybrid_.last_input_shape = x.shape();
  hybrid_.last_input_dtype = x.dtype();
  hybrid_.last_input_device = x.device();
  hybrid_.last_call_site = where;
  hybrid_.called = true;
  return (*hybrid_.function)({x}, training_ ? 1 : 0)[0];
}

void Module::export_model(const std::string& path, const ExportOptions& options) {
  std::lock_guard turn(*hybrid_.mutex);
  TANDEM_CHECK(hybrid_.on, type_name(), ".export_model('", path,
               "'): call hybridize() first; the export writes the traced graph");
  TANDEM_CHECK(hybrid_.called, type_name(), ".export_model('", path,
               "'): call the hybridized module once first; the export traces it at that "
               "input's shape");
  for (const auto& [name, tensor] : state_dict()) {
    TANDEM_CHECK(tensor.device().is_cpu(), type_name(), ".export_model('", path, "'): '", name,
                 "' is on ", tensor.device().to_string(),
                 "; an exported model is a CPU model: call to(Device::cpu()) first");
  }
  // An inference trace of its own, whatever mode the module is in.
  const bool was_training = training_;
  absl::Cleanup restore_mode = [&] { train(was_training); };
  eval();
  HybridizeOptions inference_options = hybrid_.options;
  if (inference_options.name == HybridizeOptions().name) inference_options.name = type_name();
  inference_options.inference = true;
  inference_options.differentiable = false;
  inference_options.verify = false;
  inference_options.strict = false;
  HybridFunction inference(
      [this](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{forward_as_caller(in[0])};
      },
      std::move(inference_options));
  // The nodes' lines are the user's, of the call whose shape this traces at.
  NameScope scope("", hybrid_.last_call_site);
  {
    NoGradGuard no_grad;
    const auto dims = hybrid_.last_input_shape.dims();
    inference({zeros(std::vector<int64_t>(dims.begin(), dims.end()), hybrid_.last_input_dtype,
                     hybrid_.last_input_device)});
  }
  NamedTensors names = named_parameters();
  for (auto& buffer : named_buffers()) names.push_back(std::move(buffer));
  inference.export_model(path, names, options);
}

void Module::export_onnx(const std::string& path, ExportOptions options) {
  options.format = ExportOptions::Format::kOnnx;
  export_model(path, options);
}

void Module::hybridize(bool on, HybridizeOptions options) {
  std::lock_guard turn(*hybrid_.mutex);
  hybrid_.on = on;
  hybrid_.options = std::move(options);
  if (!hybrid_.options.state_names) {
    // The graphs name the parameters and buffers they read by their paths.
    hybrid_.options.state_names = [this] {
      const StateDict state = state_dict();
      return std::vector<std::pair<std::string, Tensor>>(state.begin(), state.end());
    };
  }
  hybrid_.function.reset();
}

void Module::check_new_name(const std::string& name, const char* what) const {
  TANDEM_CHECK(!name.empty(), type_name(), ": a ", what, " name may not be empty");
  TANDEM_CHECK(name.find('.') == std::string::npos, type_name(), ": ", what, " name '", name,
               "' may not contain '.' (dots join the names of nested modules)");
  auto has = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  TANDEM_CHECK(!has(parameters_) && !has(buffers_) && !has(children_), type_name(),
               ": cannot register ", what, " '", name,
               "': a parameter, buffer or child of that name exists");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  TANDEM_CHECK(tensor.defined(), type_name(), ": parameter '", name, "' is an undefined tensor");
  TANDEM_CHECK(is_floating_point(tensor.dtype()), type_name(), ": parameter '", name,
               "' must be floating-point, got ", dtype_name(tensor.dtype()));
  if (!is_leaf(tensor)) tensor = tensor.detach();
  tensor.requires_grad_(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "buffer");
  TANDEM_CHECK(tensor.defined(), type_name(), ": buffer '", name, "' is an undefined tensor");
  if (tensor.requires_grad()) tensor = tensor.detach();
  buffers_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_constant(Tensor tensor) {
  TANDEM_CHECK(tensor.defined(), type_name(), ": a constant is an undefined tensor");
  if (tensor.requires_grad()) tensor = tensor.detach();
  constants_.push_back(tensor);
  return tensor;
}

Module& Module::to(Device device) {
  const int count = cuda_device_count();
  TANDEM_CHECK(device.is_cpu() || device.index() < count, type_name(), ".to(", device.to_string(),
               "): ",
               count == 0 ? std::string("this machine has no CUDA device")
                          : str_cat("this machine has ", count, " CUDA device(s)"));
  TANDEM_CHECK(current_tensor_observer() == nullptr, type_name(), ".to(", device.to_string(),
               ") while a function is being traced (hybridize); move the module before");
  absl::flat_hash_set<const void*> seen;
  move_to(device, seen);
  return *this;
}

void Module::move_to(Device device, absl::flat_hash_set<const void*>& seen) {
  auto move = [&](const Tensor& t) {
    if (seen.insert(t.impl_ptr().get()).second) move_to_(t, device);
  };
  for (const auto& entry : parameters_) move(entry.second);
  for (const auto& entry : buffers_) move(entry.second);
  for (const Tensor& t : constants_) move(t);
  // Traced graphs hold the old device's tensors: trace again at the next call.
  hybrid_.function.reset();
  hybrid_.called = false;
  for (const auto& entry : children_) entry.second->move_to(device, seen);
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  TANDEM_CHECK(module != nullptr, type_name(), ": child module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool params, bool buffers, bool dedup,
                     NamedTensors& out, absl::flat_hash_set<const void*>& seen) const {
  auto add = [&](const NamedTensors& list) {
    for (const auto& [name, tensor] : list) {
      const void* id = tensor.impl_ptr().get();
      if (dedup) {
        if (!seen.insert(id).second) continue;
      }
      out.emplace_back(prefix + name, tensor);
    }
  };
  if (params) add(parameters_);
  if (buffers) add(buffers_);
  for (const auto& [name, child] : children_) {
    child->collect(str_cat(prefix, name, "."), params, buffers, dedup, out, seen);
  }
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  absl::flat_hash_set<const void*> seen;
  collect("", true, false, true, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& entry : named_parameters()) out.push_back(std::move(entry.second));
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  absl::flat_hash_set<const void*> seen;
  collect("", false, true, true, out, seen);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& entry : named_buffers()) out.push_back(std::move(entry.second));
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& entry : children_) out.push_back(entry.second);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& entry : children_) entry.second->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad_();
}

StateDict Module::state_dict() const {
  NamedTensors all;
  absl::flat_hash_set<const void*> seen;
  collect("", true, true, false, all, seen);
  StateDict out;
  for (auto& [name, tensor] : all) out.insert(name, tensor.detach());
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  NamedTensors targets;
  absl::flat_hash_set<const void*> seen;
  collect("", true, true, false, targets, seen);

  // Check everything first, so that a failure changes nothing.
  if (strict) {
    std::vector<std::string> missing, unexpected;
    absl::flat_hash_set<std::string> expected;
    for (const auto& entry : targets) {
      expected.insert(entry.first);
      if (!state.contains(entry.first)) missing.push_back(entry.first);
    }
    for (const auto& entry : state) {
      if (!expected.contains(entry.first)) unexpected.push_back(entry.first);
    }
    TANDEM_CHECK(missing.empty() && unexpected.empty(), "load_state_dict into ", type_name(), ": ",
                 missing.empty() ? "" : "missing keys: ", absl::StrJoin(missing, ", "),
                 !missing.empty() && !unexpected.empty() ? "; " : "",
                 unexpected.empty() ? "" : "unexpected keys: ", absl::StrJoin(unexpected, ", "));
  }
  for (const auto& [name, target] : targets) {
    if (!state.contains(name)) continue;
    const Tensor& value = state.at(name);
    TANDEM_CHECK(value.defined(), "load_state_dict: '", name, "' is an undefined tensor");
    TANDEM_CHECK(value.shape() == target.shape() && value.dtype() == target.dtype(),
                 "load_state_dict: '", name, "' is ", describe(value), " in the state dict but ",
                 describe(target), " in the model");
  }
  NoGradGuard no_grad;
  for (const auto& [name, target] : targets) {
    // A checkpoint is device-neutral: its values go to the model's device.
    if (state.contains(name)) target.assign_(state.at(name).to(target.device()));
  }
}

void Module::save(const std::string& path) const { write_state_dict(path, state_dict()); }

void Module::load(const std::string& path, bool strict) {
  load_state_dict(read_state_dict(path), strict);
}

std::string Module::to_string_indented(int indent) const {
  std::string out = str_cat(type_name(), "(", extra_repr());
  if (children_.empty()) return out + ")";
  const std::string pad(indent + 2, ' ');
  out += "\n";
  for (const auto& [name, child] : children_) {
    out += str_cat(pad, "(", name, "): ", child->to_string_indented(indent + 2), "\n");
  }
  return out + std::string(indent, ' ') + ")";
}

std::string Module::to_string() const { return to_string_indented(0); }

}  // namespace tandem::nn
