#include "eager/symbolic_trace.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_join.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"
#include "trace/tracer.h"

namespace tandem {
namespace {

std::string input_name(size_t i) { return str_cat("input", i); }

// The free dimensions as (input, axis) -> name, checked against the
// example, and the example's value of each name.
struct ResolvedDims {
  std::vector<std::map<int, std::string>> per_input;
  trace::SymbolValues example;
};

ResolvedDims resolve(const std::vector<InputExample>& example, const FreeDims& free,
                     const std::string& what) {
  ResolvedDims out;
  out.per_input.resize(example.size());
  std::map<std::string, std::string> named_by;
  for (const auto& [input, axes] : free) {
    size_t i = 0;
    while (i < example.size() && input_name(i) != input) ++i;
    if (i == example.size()) {
      std::vector<std::string> names;
      for (size_t k = 0; k < example.size(); ++k) names.push_back(input_name(k));
      throw Error(str_cat(what, ": dynamic_dims names input '", input,
                          "', but the model's inputs are ", absl::StrJoin(names, ", ")));
    }
    const Shape& shape = example[i].shape;
    for (const auto& [given_axis, name] : axes) {
      TANDEM_CHECK(given_axis >= -shape.rank() && given_axis < shape.rank(), what,
                   ": dynamic_dims gives axis ", given_axis, " of input '", input,
                   "', which has shape ", shape.to_string());
      TANDEM_CHECK(trace::valid_symbol_name(name), what, ": '", name, "' (axis ", given_axis,
                   " of input '", input,
                   "') is not a valid dimension name (a letter or '_', then letters, digits "
                   "or '_', at most 64 bytes)");
      const int axis = given_axis < 0 ? given_axis + shape.rank() : given_axis;
      TANDEM_CHECK(out.per_input[i].emplace(axis, name).second, what, ": axis ", axis,
                   " of input '", input, "' is named twice");
      const std::string place = str_cat("axis ", axis, " of input '", input, "'");
      auto [it, inserted] = out.example.emplace(name, shape[axis]);
      TANDEM_CHECK(inserted || it->second == shape[axis], what, ": ", place, " is named '", name,
                   "' like ", named_by[name], ", but the example gives them sizes ", shape[axis],
                   " and ", it->second, "; one name is one size");
      if (inserted) named_by[name] = place;
    }
  }
  return out;
}

// Whether `a` and `b` hold the same bytes.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.device().is_cpu() ? a : a.to(Device::cpu());
  const Tensor y = b.device().is_cpu() ? b : b.to(Device::cpu());
  x.wait_to_read();
  y.wait_to_read();
  return x.nbytes() == 0 || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// A state input is read live from the example's tensor at every size. The
// calls at the probes capture the same tensors (parameters, optimizer
// state), or tensors made afresh on the host, which must then hold the same
// values: one whose value follows a size (a mean's 1 / count as a scalar)
// would be frozen at the example's.
void check_state_follows_no_size(const trace::ProbePlan& plan, const trace::Graph& graph,
                                 const std::vector<TracedCall>& calls,
                                 const std::vector<std::string>& sources) {
  size_t state = 0;
  for (const trace::GraphInput& input : graph.inputs) {
    if (input.kind != trace::InputKind::kState) continue;
    const Tensor& example = calls.front().state[state];
    for (size_t p = 1; p < calls.size(); ++p) {
      const Tensor& other = calls[p].state[state];
      if (other.impl_ptr() == example.impl_ptr() || same_values(other, example)) continue;
      std::string reader;
      for (size_t n = 0; n < graph.nodes.size() && reader.empty(); ++n) {
        const std::vector<trace::ValueId>& in = graph.nodes[n].inputs;
        if (std::find(in.begin(), in.end(), input.value) == in.end()) continue;
        reader = str_cat(", read by ", graph.nodes[n].op->name,
                         sources[n].empty() ? "" : str_cat(" at ", sources[n]));
      }
      throw Error(str_cat(
          "the traced code captured tensor '", input.name, "' (", dtype_name(example.dtype()),
          example.shape().to_string(), reader, ") made on the host, whose values differ at ",
          trace::values_text(plan.points[p]), " from those at ", trace::values_text(plan.points[0]),
          ": a value computed from a size, which a graph would keep at the "
          "example's; make it with ops (full, arange) from the input's shape"));
    }
    ++state;
  }
}

}  // namespace

SymbolicTrace fit_free_dims(const TraceAt& trace_at, const std::vector<InputExample>& example,
                            const FreeDims& free, const std::string& what,
                            std::optional<TracedCall> at_example) {
  const ResolvedDims dims = resolve(example, free, what);
  SymbolicTrace out;
  out.plan = dims.example.empty() ? trace::ProbePlan{{}, {trace::SymbolValues{}}}
                                  : trace::plan_probes(dims.example);
  std::vector<TracedCall> calls;
  if (at_example) calls.push_back(std::move(*at_example));
  for (size_t p = calls.size(); p < out.plan.points.size(); ++p) {
    const trace::SymbolValues& point = out.plan.points[p];
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < example.size(); ++i) {
      std::vector<int64_t> shape(example[i].shape.begin(), example[i].shape.end());
      for (const auto& [axis, name] : dims.per_input[i]) shape[axis] = point.at(name);
      Tensor zero = zeros(shape, example[i].dtype, example[i].device);
      if (example[i].requires_grad) zero.requires_grad_();
      inputs.push_back(std::move(zero));
    }
    try {
      calls.push_back(trace_at(inputs));
    } catch (const Error& e) {
      if (calls.empty()) throw;
      if (p >= out.plan.first_extra_check()) {  // Sizes the model refuses: not a check.
        out.plan.drop_check(p--);
        continue;
      }
      throw Error(str_cat(what, ": tracing at ", trace::values_text(point), " (the example has ",
                          trace::values_text(out.plan.points[0]), ") to free ",
                          absl::StrJoin(out.plan.symbols, ", "), " failed: ", e.what(),
                          "; fix that dimension, or make the model's code follow it"));
    }
  }
  for (const trace::Node& node : calls.front().graph.nodes) {
    out.sources.push_back(node.where.line() == 0 ? std::string() : format_location(node.where));
  }
  try {
    if (calls.size() > 1) {
      std::vector<trace::Graph> graphs;
      for (TracedCall& call : calls) graphs.push_back(std::move(call.graph));
      out.symbolic = trace::fit_symbolic_shapes(out.plan, graphs, out.sources);
      check_state_follows_no_size(out.plan, graphs.front(), calls, out.sources);
      calls.front().graph = std::move(graphs.front());
    }
  } catch (const Error& e) {
    throw Error(str_cat(what, ": the graph cannot follow ", absl::StrJoin(out.plan.symbols, ", "),
                        ": ", e.message()));
  }
  out.graph = std::move(calls.front().graph);
  out.state = std::move(calls.front().state);
  return out;
}

SymbolicTrace trace_symbolic(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<InputExample>& example, const FreeDims& free, const std::string& what) {
  NoGradGuard no_grad;
  const uint64_t random = random_state();
  auto trace_at = [&](const std::vector<Tensor>& inputs) {
    manual_seed(random);
    trace::Tracer tracer;
    for (size_t i = 0; i < inputs.size(); ++i) tracer.add_input(inputs[i], input_name(i));
    const std::vector<Tensor> outputs = fn(inputs);
    for (size_t o = 0; o < outputs.size(); ++o) {
      TANDEM_CHECK(outputs[o].defined(), "the function returned an undefined tensor as output ", o);
      tracer.add_output(outputs[o], str_cat("output", o));
    }
    trace::Trace traced = tracer.finish();
    // The ops ran on zeros at sizes the model may refuse only at run time
    // (an index past a table): the failure belongs to this probe.
    for (const Tensor& output : outputs) output.wait_to_read();
    TANDEM_CHECK(traced.state_writes.empty(), what,
                 ": the function updates state (e.g. batch norm's running statistics in "
                 "training mode), which an exported model cannot do; export an inference "
                 "function");
    return TracedCall{std::move(traced.graph), std::move(traced.state)};
  };
  SymbolicTrace out;
  try {
    out = fit_free_dims(trace_at, example, free, what);
  } catch (...) {
    manual_seed(random);
    throw;
  }
  manual_seed(random);
  return out;
}

std::vector<Shape> shapes_at(const SymbolicTrace& t, const trace::SymbolValues& values) {
  std::vector<Shape> shapes;
  for (const trace::GraphInput& input : t.graph.inputs) {
    if (input.kind != trace::InputKind::kData) continue;
    const Shape& traced = t.graph.value(input.value).shape;
    Shape::Dims dims(traced.begin(), traced.end());
    for (int a = 0; a < traced.rank(); ++a) {
      if (const trace::SizeExpr* size = t.symbolic.dim(input.value, a)) {
        dims[static_cast<size_t>(a)] = size->evaluate(values, input.name);
      }
    }
    shapes.emplace_back(absl::MakeConstSpan(dims));
  }
  return shapes;
}

}  // namespace tandem
