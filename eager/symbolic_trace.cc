#include "eager/symbolic_trace.h"

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

}  // namespace

SymbolicTrace trace_symbolic(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<InputExample>& example, const FreeDims& free, const std::string& what) {
  const ResolvedDims dims = resolve(example, free, what);
  SymbolicTrace out;
  out.plan = dims.example.empty() ? trace::ProbePlan{{}, {trace::SymbolValues{}}}
                                  : trace::plan_probes(dims.example);
  NoGradGuard no_grad;
  const uint64_t random = random_state();
  std::vector<trace::Graph> graphs;
  for (const trace::SymbolValues& point : out.plan.points) {
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < example.size(); ++i) {
      std::vector<int64_t> shape(example[i].shape.begin(), example[i].shape.end());
      for (const auto& [axis, name] : dims.per_input[i]) shape[axis] = point.at(name);
      inputs.push_back(zeros(shape, example[i].dtype, example[i].device));
    }
    manual_seed(random);
    trace::Trace traced;
    try {
      trace::Tracer tracer;
      for (size_t i = 0; i < inputs.size(); ++i) tracer.add_input(inputs[i], input_name(i));
      const std::vector<Tensor> outputs = fn(inputs);
      for (size_t o = 0; o < outputs.size(); ++o) {
        TANDEM_CHECK(outputs[o].defined(), "the function returned an undefined tensor as output ",
                     o);
        tracer.add_output(outputs[o], str_cat("output", o));
      }
      traced = tracer.finish();
    } catch (const Error& e) {
      if (graphs.empty()) throw;
      throw Error(str_cat(what, ": tracing at ", trace::values_text(point), " (the example has ",
                          trace::values_text(out.plan.points[0]), ") to free ",
                          absl::StrJoin(out.plan.symbols, ", "), " failed: ", e.what(),
                          "; fix that dimension, or make the model's code follow it"));
    }
    TANDEM_CHECK(traced.state_writes.empty(), what,
                 ": the function updates state (e.g. batch norm's running statistics in "
                 "training mode), which an exported model cannot do; export an inference "
                 "function");
    if (graphs.empty()) {
      out.state = std::move(traced.state);
      for (const trace::Node& node : traced.graph.nodes) {
        out.sources.push_back(node.where.line() == 0 ? std::string() : format_location(node.where));
      }
    }
    graphs.push_back(std::move(traced.graph));
  }
  manual_seed(random);
  try {
    if (graphs.size() > 1) {
      out.symbolic = trace::fit_symbolic_shapes(out.plan, graphs, out.sources);
    }
  } catch (const Error& e) {
    throw Error(str_cat(what, ": the graph cannot follow ", absl::StrJoin(out.plan.symbols, ", "),
                        ": ", e.message()));
  }
  out.graph = std::move(graphs.front());
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
