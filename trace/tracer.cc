#include "trace/tracer.h"

#include "core/error.h"
#include "kernels/known_ops.h"

namespace tandem::trace {
namespace {

thread_local int active_tracers = 0;

std::vector<int64_t> dims_of(const Shape& shape) { return {shape.begin(), shape.end()}; }

}  // namespace

Tracer::Tracer()
    : outer_scope_(current_scope_path()),
      op_scope_(std::make_unique<kernels::ObserverScope>(this)),
      tensor_scope_(std::make_unique<TensorObserverScope>(this)) {
  ++active_tracers;
}

std::string Tracer::scope() const {
  std::string path = current_scope_path();
  if (outer_scope_.empty()) return path;
  // Inside the traced module: drop its own path and the dot after it.
  if (path.size() > outer_scope_.size() && path.starts_with(outer_scope_) &&
      path[outer_scope_.size()] == '.') {
    return path.substr(outer_scope_.size() + 1);
  }
  return path == outer_scope_ ? std::string() : path;
}

Tracer::~Tracer() {
  if (!finished_) --active_tracers;
}

bool Tracer::active() { return active_tracers > 0; }

ValueId Tracer::add_input(const Tensor& tensor, std::string name) {
  TANDEM_CHECK(!find(tensor).has_value(), "input '", name,
               "' is already part of the trace (passed twice, or made by a traced op)");
  input_names_.insert(name);
  ValueId id = graph_.add_input(std::move(name), InputKind::kData, tensor.shape(), tensor.dtype());
  remember(tensor, id);
  return id;
}

int Tracer::add_output(const Tensor& tensor, std::string name) {
  ValueId id = value_of(tensor, std::source_location{});
  graph_.add_output(id, std::move(name));
  return static_cast<int>(graph_.outputs.size()) - 1;
}

const std::vector<Tracer::Known>* Tracer::known_in(const Tensor& tensor) const {
  auto it = known_.find(tensor.storage().get());
  if (it == known_.end() || it->second.storage.expired()) return nullptr;
  return &it->second.values;
}

std::optional<ValueId> Tracer::find(const Tensor& tensor) const {
  const std::vector<Known>* known = known_in(tensor);
  if (known == nullptr) return std::nullopt;
  for (const Known& k : *known) {
    if (k.byte_offset == tensor.byte_offset() && k.shape == tensor.shape() &&
        k.dtype == tensor.dtype()) {
      return k.value;
    }
  }
  return std::nullopt;
}

void Tracer::remember(const Tensor& tensor, ValueId value) {
  Seen& seen = known_[tensor.storage().get()];
  if (seen.storage.expired()) seen = {tensor.storage(), {}};  // New, or new data at an old address.
  seen.values.push_back({tensor.byte_offset(), tensor.shape(), tensor.dtype(), value});
}

ValueId Tracer::value_of(const Tensor& tensor, const std::source_location& where) {
  if (std::optional<ValueId> id = find(tensor)) return *id;
  if (const std::vector<Known>* known = known_in(tensor)) {
    // A view of data the trace knows (Note [How traced values are identified]):
    // find a known value of the same dtype whose bytes contain it.
    const size_t begin = tensor.byte_offset(), end = begin + tensor.nbytes();
    for (const Known& k : *known) {
      const size_t k_end =
          k.byte_offset + static_cast<size_t>(k.shape.numel()) * dtype_size(k.dtype);
      if (k.dtype == tensor.dtype() && k.byte_offset <= begin && end <= k_end) {
        Known base = k;  // record_view appends to the vector `k` lives in.
        return record_view(tensor, base, where);
      }
    }
  }
  // Data from outside the trace: a state input, read from this handle on
  // every replay.
  // The namer's name, unless it gives none or one an input has (graph
  // inputs are named uniquely); else state<k>, the first k free.
  std::string name = state_namer_ ? state_namer_(tensor) : std::string();
  for (size_t k = state_.size(); name.empty() || input_names_.contains(name); ++k) {
    name = str_cat("state", k);
  }
  input_names_.insert(name);
  ValueId id = graph_.add_input(std::move(name), InputKind::kState, tensor.shape(), tensor.dtype());
  state_index_[id] = state_.size();
  state_.push_back(tensor);
  remember(tensor, id);
  if (on_capture_) on_capture_(tensor);
  return id;
}

ValueId Tracer::record_view(const Tensor& tensor, const Known& base,
                            const std::source_location& where) {
  const int64_t element = static_cast<int64_t>(dtype_size(tensor.dtype()));
  const int64_t begin = static_cast<int64_t>(tensor.byte_offset() - base.byte_offset) / element;
  const int64_t count = tensor.numel();
  // As few nodes as say what the view is, so that a dynamic batch carries
  // through them (trace/symbolic_shapes.h): a reshape of all of the base;
  // rows of its leading axis (slice on axis 0), reshaped if need be; or, for
  // any other range of its elements, flatten -> slice -> reshape.
  const int64_t row = base.shape.rank() > 0 ? base.shape.stride(0) : 1;
  ValueId id = base.value;
  if (begin == 0 && count == base.shape.numel()) {
    // The whole base under another shape.
  } else if (base.shape.rank() > 0 && row > 0 && begin % row == 0 && count % row == 0) {
    id = graph_.add_node(
        kernels::slice_op(),
        {{"axis", int64_t{0}}, {"begin", begin / row}, {"end", (begin + count) / row}}, {id}, where,
        scope())[0];
  } else {
    if (base.shape.rank() != 1) {
      id = graph_.add_node(kernels::reshape_op(), {{"shape", std::vector<int64_t>{-1}}}, {id},
                           where, scope())[0];
    }
    id = graph_.add_node(kernels::slice_op(),
                         {{"axis", int64_t{0}}, {"begin", begin}, {"end", begin + count}}, {id},
                         where, scope())[0];
  }
  if (graph_.value(id).shape != tensor.shape()) {
    id = graph_.add_node(kernels::reshape_op(), {{"shape", dims_of(tensor.shape())}}, {id}, where,
                         scope())[0];
  }
  remember(tensor, id);
  return id;
}

void Tracer::on_view(const Tensor& view, const Tensor& base, const std::source_location& where) {
  if (find(view)) return;  // Data the trace already names.
  // A view of data from outside the trace waits until an op reads it (it
  // becomes a state input then, with its view nodes).
  const std::vector<Known>* known = known_in(base);
  if (known == nullptr) return;
  for (const Known& k : *known) {
    if (k.byte_offset == base.byte_offset() && k.shape == base.shape() && k.dtype == base.dtype()) {
      Known known = k;  // record_view appends to the vector `k` lives in.
      record_view(view, known, where);
      return;
    }
  }
}

void Tracer::on_op(const kernels::OpDef& op, absl::Span<const Tensor> inputs,
                   absl::Span<const Tensor> outputs, const kernels::Attrs& attrs,
                   const std::source_location& where) {
  std::vector<ValueId> ids;
  ids.reserve(inputs.size());
  for (const Tensor& t : inputs) ids.push_back(value_of(t, where));
  kernels::TensorMetas metas;
  metas.reserve(outputs.size());
  for (const Tensor& t : outputs) metas.push_back({t.shape(), t.dtype()});
  std::vector<ValueId> made = graph_.add_node(op, attrs, std::move(ids), metas, where, scope());
  for (size_t k = 0; k < outputs.size(); ++k) {
    remember(outputs[k], made[k]);
    made_here_.insert(outputs[k].impl_ptr().get());
  }
}

void Tracer::on_value_read(const Tensor& tensor, const char* what,
                           const std::source_location& where) {
  throw Error(
      str_cat("cannot read a tensor's value while tracing (shape ", tensor.shape().to_string(),
              "): a trace records ops, not values, so a branch or loop on this value "
              "would be frozen at the value of the first call. Compute it with ops "
              "(e.g. where, maximum) or read it outside the hybridized code"),
      what, where);
}

void Tracer::on_assign(const Tensor& target, const Tensor& /*value*/) {
  const TensorImpl* impl = target.impl_ptr().get();
  if (made_here_.contains(impl)) return;  // A temporary of the traced code.
  if (assigned_set_.insert(impl).second) assigned_.push_back(target);
}

Trace Tracer::finish() {
  TANDEM_INTERNAL_ASSERT(!finished_, "Tracer::finish() called twice");
  // Stop observing first: nothing below may be recorded.
  op_scope_.reset();
  tensor_scope_.reset();
  finished_ = true;
  --active_tracers;

  Trace result;
  for (const Tensor& target : assigned_) {
    ValueId id = value_of(target, std::source_location{});
    // A tensor rebound to the data it held when captured needs no write.
    auto state = state_index_.find(id);
    if (state != state_index_.end() && state_[state->second].impl_ptr() == target.impl_ptr()) {
      continue;
    }
    graph_.add_output(id, str_cat("state_write", result.state_writes.size()));
    result.state_writes.push_back({target, static_cast<int>(graph_.outputs.size()) - 1});
  }
  result.graph = std::move(graph_);
  result.state = std::move(state_);
  known_.clear();
  return result;
}

}  // namespace tandem::trace
