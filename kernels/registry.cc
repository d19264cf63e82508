#include "kernels/registry.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "kernels/cpu/onednn.h"
#include "kernels/ops/families.h"

namespace tandem::kernels {

const Registry& Registry::global() {
  static const Registry* registry = [] {
    // Never destroyed once made (ops may run during exit); freed if making it
    // throws (warm_up refusing a setting), as the next call tries again.
    auto r = std::make_unique<Registry>();
    // Every op family, once. Order does not matter.
    register_elementwise_binary_ops(*r);
    register_elementwise_unary_ops(*r);
    register_reduce_ops(*r);
    register_shape_ops(*r);
    register_creation_ops(*r);
    register_matmul_ops(*r);
    register_conv_pool_ops(*r);
    register_norm_ops(*r);
    register_softmax_loss_ops(*r);
    register_fused_elementwise_ops(*r);
    register_device_copy_ops(*r);
    register_indexing_ops(*r);
    register_scan_ops(*r);
    register_sort_ops(*r);
    register_padding_ops(*r);
    register_interpolate_ops(*r);
    register_attention_ops(*r);
    register_recurrence_ops(*r);
    register_collective_ops(*r);
#ifdef TANDEM_WITH_CUDA
    register_cuda_kernels(*r);  // After the ops whose slots it fills.
#endif
    onednn::warm_up();  // Before any kernel can run; see Note [oneDNN at exit].
    return r.release();
  }();
  return *registry;
}

const OpDef* Registry::find(std::string_view name) const {
  auto it = ops_.find(absl::string_view(name.data(), name.size()));
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef& Registry::get(std::string_view name) const {
  const OpDef* op = find(name);
  TANDEM_CHECK(op != nullptr, "unknown op '", name, "'");
  return *op;
}

std::vector<const OpDef*> Registry::all() const {
  std::vector<const OpDef*> ops;
  for (const auto& [name, op] : ops_) ops.push_back(op.get());
  std::sort(ops.begin(), ops.end(),
            [](const OpDef* a, const OpDef* b) { return a->name < b->name; });
  return ops;
}

void Registry::add(OpDef def, std::source_location where) {
  TANDEM_INTERNAL_ASSERT(!def.name.empty(), "an op without a name");
  TANDEM_INTERNAL_ASSERT(!ops_.contains(def.name), "op '", def.name, "' registered twice");
  TANDEM_INTERNAL_ASSERT(def.infer != nullptr, "op '", def.name, "' has no shape inference");
  TANDEM_INTERNAL_ASSERT(def.cpu != nullptr, "op '", def.name, "' has no CPU kernel");
  TANDEM_INTERNAL_ASSERT(def.differentiable == (def.gradient != nullptr), "op '", def.name,
                         "' must have a gradient or be marked not differentiable");
  TANDEM_INTERNAL_ASSERT(def.num_inputs == kVariadic || def.num_inputs >= 0, "op '", def.name,
                         "' has a bad input count");
  for (const AttrSpec& spec : def.attrs) {
    if (spec.required) {
      def.has_required_attrs = true;
    } else {
      def.defaults.set(spec.name, spec.default_value);
    }
  }
  def.defined_in.push_back(where.file_name());
  std::string name = def.name;
  ops_.emplace(std::move(name), std::make_unique<OpDef>(std::move(def)));
}

void Registry::set_cuda_kernel(std::string_view name, KernelFn kernel, std::source_location where) {
  auto it = ops_.find(absl::string_view(name.data(), name.size()));
  TANDEM_INTERNAL_ASSERT(it != ops_.end(), "a CUDA kernel for unknown op '", name, "'");
  TANDEM_INTERNAL_ASSERT(it->second->cuda == nullptr, "op '", name, "' has two CUDA kernels");
  it->second->cuda = kernel;
  it->second->defined_in.push_back(where.file_name());
}

bool has_attr(const OpDef& op, std::string_view name) {
  return std::any_of(op.attrs.begin(), op.attrs.end(),
                     [&](const AttrSpec& spec) { return spec.name == name; });
}

bool is_random(const OpDef& op) { return has_attr(op, "seed"); }

Attrs resolve_attrs(const OpDef& op, const Attrs& given) {
  Attrs resolved = op.defaults;
  for (const auto& [name, value] : given.items()) {
    auto spec = std::find_if(op.attrs.begin(), op.attrs.end(),
                             [&name = name](const AttrSpec& s) { return s.name == name; });
    if (spec == op.attrs.end()) {
      std::string known;
      for (const AttrSpec& s : op.attrs) known += str_cat(known.empty() ? "" : ", ", s.name);
      TANDEM_CHECK(false, "unknown attribute '", name, "'",
                   known.empty() ? std::string("; the op takes none")
                                 : str_cat("; expected one of: ", known));
    }
    AttrValue typed = value;
    // An integer is a fine value for a float attribute (e.g. scale=2).
    if (std::holds_alternative<double>(spec->default_value) &&
        std::holds_alternative<int64_t>(value)) {
      typed = static_cast<double>(std::get<int64_t>(value));
    }
    TANDEM_CHECK(typed.index() == spec->default_value.index(), "attribute '", name, "' must be ",
                 attr_type_name(spec->default_value), ", got ", attr_type_name(value), " ",
                 attr_to_string(value));
    resolved.set(name, std::move(typed));
  }
  if (op.has_required_attrs) {
    for (const AttrSpec& spec : op.attrs) {
      TANDEM_CHECK(!spec.required || resolved.has(spec.name), "missing required attribute '",
                   spec.name, "'");
    }
  }
  return resolved;
}

}  // namespace tandem::kernels
