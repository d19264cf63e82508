#include "trace/symbolic_shapes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/str_join.h"

#include "core/error.h"
#include "kernels/known_ops.h"
#include "trace/size_search.h"

namespace tandem::trace {
namespace {

constexpr size_t kMaxSymbols = 4;

// How far past the example a sweep of each free dimension goes.
constexpr int64_t kSweepBeyond = 16;

// The last size a sweep of `name` visits: kSweepBeyond past the example,
// or twice the example if that is more.
int64_t sweep_end(const ProbePlan& plan, const std::string& name) {
  const int64_t example = plan.points[0].at(name);
  return std::max(example + kSweepBeyond, 2 * example);
}

// "node 5 (reshape in 'encoder.0', traced at model.cc:12)".
std::string node_text(const Graph& graph, size_t n, absl::Span<const std::string> sources) {
  const std::string& source = n < sources.size() ? sources[n] : std::string();
  const std::string& scope = graph.nodes[n].scope;
  return str_cat("node ", n, " (", graph.nodes[n].op->name,
                 scope.empty() ? std::string() : str_cat(" in '", scope, "'"),
                 source.empty() ? std::string() : str_cat(", traced at ", source), ")");
}

// The number at each point of the plan, as the polynomial the grid gives,
// checked at the points after it; nullopt for a number that never changes.
// `what` names the number for the error.
std::optional<SizeExpr> fit(const ProbePlan& plan, absl::Span<const int64_t> numbers,
                            const std::string& what) {
  if (std::all_of(numbers.begin(), numbers.end(),
                  [&](int64_t v) { return v == numbers.front(); })) {
    return std::nullopt;
  }
  const size_t corners = size_t{1} << plan.symbols.size();
  SizeExpr poly;
  try {
    // Lagrange interpolation on the grid: symbol s takes a (bit clear) or
    // b = a +- 1 (bit set), so each basis polynomial has integer
    // coefficients: (x - b) / (a - b) = d*b - d*x and (x - a) / (b - a) =
    // d*x - d*a, with d = b - a.
    for (size_t m = 0; m < corners; ++m) {
      SizeExpr term = SizeExpr::constant(numbers[m]);
      for (size_t s = 0; s < plan.symbols.size(); ++s) {
        const std::string& name = plan.symbols[s];
        const int64_t a = plan.points[0].at(name);
        const int64_t b = plan.points[size_t{1} << s].at(name);
        const int64_t d = b - a;
        const SizeExpr x = SizeExpr::symbol(name);
        term = term * ((m >> s) & 1 ? SizeExpr::constant(d) * x + SizeExpr::constant(-d * a)
                                    : SizeExpr::constant(-d) * x + SizeExpr::constant(d * b));
      }
      poly = poly + term;
    }
  } catch (const Error& e) {
    throw Error(str_cat(what, " cannot be written as a size: ", e.message()));
  }
  bool checked = true;
  for (size_t p = corners; checked && p < plan.points.size(); ++p) {
    try {
      checked = poly.evaluate(plan.points[p], what) == numbers[p];
    } catch (const Error&) {
      checked = false;
    }
  }
  if (!checked) {
    std::vector<std::string> seen;
    for (size_t i = 0; i < numbers.size(); ++i) {
      seen.push_back(str_cat(numbers[i], " at ", values_text(plan.points[i])));
    }
    throw Error(str_cat(what, " is ", absl::StrJoin(seen, ", "),
                        ": no sum of products of the free dimensions (or of floor divisions "
                        "of them, for an op's output) gives that, so this graph cannot follow "
                        "them (fix the dimension, or compute the size from the input's shape "
                        "with + and * only)"));
  }
  return poly;
}

bool same_kind(const kernels::AttrValue& a, const kernels::AttrValue& b) {
  return a.index() == b.index();
}

// Throws unless `graphs` are one graph up to sizes: the same inputs, nodes
// (ops, wiring, attribute names and every attribute that is not a size)
// and outputs.
void check_same_structure(const ProbePlan& plan, absl::Span<const Graph> graphs,
                          absl::Span<const std::string> sources) {
  const Graph& g0 = graphs[0];
  for (size_t p = 1; p < graphs.size(); ++p) {
    const Graph& g = graphs[p];
    const std::string at = str_cat("at ", values_text(plan.points[p]), " (traced at ",
                                   values_text(plan.points[0]), ")");
    TANDEM_CHECK(g.inputs.size() == g0.inputs.size() && g.values.size() == g0.values.size(),
                 "the model reads ", g.inputs.size(), " inputs and makes ", g.values.size(),
                 " values ", at, " but ", g0.inputs.size(), " and ", g0.values.size(),
                 " at the example: its code takes another path at other sizes, so it has no "
                 "one graph for them");
    for (size_t i = 0; i < g0.inputs.size(); ++i) {
      const GraphInput& a = g0.inputs[i];
      const GraphInput& b = g.inputs[i];
      TANDEM_CHECK(a.kind == b.kind && a.value == b.value &&
                       g.value(b.value).dtype == g0.value(a.value).dtype,
                   "graph input ", i, " is '", b.name, "' ", at, " but '", a.name,
                   "' at the example: the model's code takes another path at other sizes");
    }
    const size_t nodes = std::min(g.nodes.size(), g0.nodes.size());
    for (size_t n = 0; n < nodes; ++n) {
      const Node& a = g0.nodes[n];
      const Node& b = g.nodes[n];
      bool same = a.op == b.op && a.inputs == b.inputs && a.outputs == b.outputs &&
                  a.attrs.items().size() == b.attrs.items().size();
      for (size_t k = 0; same && k < a.attrs.items().size(); ++k) {
        const auto& [name_a, value_a] = a.attrs.items()[k];
        const auto& [name_b, value_b] = b.attrs.items()[k];
        same =
            name_a == name_b && same_kind(value_a, value_b) &&
            (std::holds_alternative<int64_t>(value_a) || std::holds_alternative<double>(value_a) ||
             std::holds_alternative<std::vector<int64_t>>(value_a) || value_a == value_b);
        if (same && std::holds_alternative<std::vector<int64_t>>(value_a)) {
          same = std::get<std::vector<int64_t>>(value_a).size() ==
                 std::get<std::vector<int64_t>>(value_b).size();
        }
      }
      TANDEM_CHECK(same, node_text(g0, n, sources), " is ", b.op->name, " with other inputs or ",
                   "attributes ", at,
                   ": the model's code takes another path at other sizes, "
                   "so it has no one graph for them");
    }
    TANDEM_CHECK(g.nodes.size() == g0.nodes.size(), "the model makes ", g.nodes.size(), " nodes ",
                 at, " but ", g0.nodes.size(),
                 " at the example: its code takes "
                 "another path at other sizes");
    bool same_outputs = g.outputs.size() == g0.outputs.size();
    for (size_t o = 0; same_outputs && o < g.outputs.size(); ++o) {
      same_outputs = g.outputs[o].value == g0.outputs[o].value;
    }
    TANDEM_CHECK(same_outputs, "the model returns other values ", at,
                 ": its code takes another path at other sizes");
    for (size_t v = 0; v < g.values.size(); ++v) {
      TANDEM_CHECK(g.values[v].shape.rank() == g0.values[v].shape.rank(), "value ", v, " has rank ",
                   g.values[v].shape.rank(), " ", at, " but ", g0.values[v].shape.rank(),
                   " at the example");
    }
  }
}

// A slice of a fixed-size axis by a free bound (positional encodings:
// table[0:seq]) is only what the trace saw while the bound fits the axis;
// past it the slice would clamp.
// Adds those of node `n`.
void find_slice_limits(const Graph& graph, SymbolicShapes& symbolic, size_t n) {
  for (const SymbolicAttr& attr : symbolic.attrs) {
    if (attr.node != static_cast<int>(n)) continue;
    const Node& node = graph.nodes[n];
    if (node.op != &kernels::slice_op() || (attr.attr != "begin" && attr.attr != "end")) continue;
    const Shape& in = graph.value(node.inputs[0]).shape;
    int64_t axis = node.attrs.get_int("axis");
    if (axis < 0) axis += in.rank();
    if (symbolic.dim(node.inputs[0], static_cast<int>(axis)) != nullptr) continue;
    symbolic.limits.push_back({attr.size, in[static_cast<int>(axis)], attr.node});
  }
}

// Called after each node is inferred again: its index, and the graph so far.
using AfterNode = std::function<void(size_t, const Graph&)>;

// `graph` with its data inputs given `data_shapes`, `attrs` in place of the
// nodes' own, and every node's outputs inferred again. `renumber` maps the
// old value ids to the new.
Graph reinfer(const Graph& graph, absl::Span<const Shape> data_shapes,
              const std::vector<kernels::Attrs>& attrs, absl::Span<const std::string> sources,
              const std::string& at, std::vector<ValueId>& renumber, const AfterNode& after_node) {
  Graph out;
  renumber.assign(graph.values.size(), -1);
  size_t data = 0;
  for (const GraphInput& input : graph.inputs) {
    const Value& v = graph.value(input.value);
    if (input.kind == InputKind::kConstant) {
      renumber[input.value] = out.add_constant(input.name, input.constant);
      continue;
    }
    Shape shape = v.shape;
    if (input.kind == InputKind::kData) {
      TANDEM_INTERNAL_ASSERT(data < data_shapes.size(), "too few data shapes");
      shape = data_shapes[data++];
    }
    renumber[input.value] = out.add_input(input.name, input.kind, shape, v.dtype);
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    std::vector<ValueId> inputs;
    for (ValueId id : node.inputs) inputs.push_back(renumber[id]);
    std::vector<ValueId> outputs;
    try {
      outputs = out.add_node(*node.op, attrs[n], std::move(inputs), node.where, node.scope);
    } catch (const Error& e) {
      throw Error(
          str_cat(node_text(graph, n, sources), " cannot take the shapes ", at, ": ", e.message()));
    }
    for (size_t k = 0; k < outputs.size(); ++k) renumber[node.outputs[k]] = outputs[k];
    if (after_node) after_node(n, out);
  }
  for (const GraphOutput& output : graph.outputs) {
    out.add_output(renumber[output.value], output.name);
  }
  return out;
}

// The expression of dimension `axis` of node output `id`, from what shape
// inference gives at many sizes (trace/size_search.h); nullopt if none is
// found. Defined below, with instantiation.
std::optional<SizeExpr> derive_dim(const ProbePlan& plan, const Graph& graph,
                                   const SymbolicShapes& symbolic,
                                   absl::Span<const std::string> sources, ValueId id, int axis);

// Sets the expression of dimension `axis` of `id`.
void set_dim(SymbolicShapes& symbolic, ValueId id, int axis, SizeExpr size) {
  auto it = std::lower_bound(symbolic.dims.begin(), symbolic.dims.end(), std::pair(id, axis),
                             [](const SymbolicDim& d, const std::pair<ValueId, int>& key) {
                               return std::pair(d.value, d.axis) < key;
                             });
  if (it != symbolic.dims.end() && it->value == id && it->axis == axis) {
    it->size = std::move(size);
  } else {
    symbolic.dims.insert(it, {id, axis, std::move(size)});
  }
}

// A reshape keeps the number of elements. An element of its target that
// the grid saw fixed may still follow a dimension that moves in steps
// (reshape back to [n, c, length] after a stride-3 convolution: the length
// is 3 at the three lengths the grid traces). Where the target's product
// then differs from the input's at some size, the target is aligned with
// the input's dimensions in order, each element the product of a run of
// them (equal to the element at every probe), and fixed elements whose run
// moves take the run's expression. Returns whether one did.
// `unfitted` holds the elements no polynomial gave (they vary at the
// probes), each with its number at every plan point; they must take a
// run's expression.
bool reconcile_reshape(const ProbePlan& plan, const Graph& graph, SymbolicShapes& symbolic,
                       size_t n, const std::map<size_t, std::vector<int64_t>>& unfitted = {}) {
  const Node& node = graph.nodes[n];
  if (node.op != &kernels::reshape_op()) return false;
  const ValueId in = node.inputs[0];
  const Shape& in_shape = graph.value(in).shape;
  const int rank = in_shape.rank();
  const std::vector<int64_t>& target = node.attrs.get_ints("shape");
  const auto element = [&](size_t e) -> SizeExpr {
    for (const SymbolicAttr& a : symbolic.attrs) {
      if (a.node == static_cast<int>(n) && a.attr == "shape" && a.element == static_cast<int>(e)) {
        return a.size;
      }
    }
    return SizeExpr::constant(target[e]);
  };
  const auto run = [&](int first, int end) {
    SizeExpr product = SizeExpr::constant(1);
    for (int a = first; a < end; ++a) {
      const SizeExpr* size = symbolic.dim(in, a);
      product = product * (size ? *size : SizeExpr::constant(in_shape[a]));
    }
    return product;
  };
  const auto equal_at = [](const SizeExpr& x, const SizeExpr& y,
                           const std::vector<SymbolValues>& points) {
    try {
      for (const SymbolValues& values : points) {
        if (x.evaluate(values, "a reshape") != y.evaluate(values, "a reshape")) return false;
      }
    } catch (const Error&) {
      return false;
    }
    return true;
  };
  std::vector<SymbolValues> swept;
  for (const std::string& name : plan.symbols) {
    for (int64_t size = 1; size <= sweep_end(plan, name); ++size) {
      swept.push_back(plan.points[0]);
      swept.back()[name] = size;
    }
  }
  std::vector<SizeExpr> elements;
  SizeExpr target_product = SizeExpr::constant(1);
  for (size_t e = 0; e < target.size(); ++e) {
    elements.push_back(element(e));
    target_product = target_product * elements.back();
  }
  if (target.empty() || (unfitted.empty() && equal_at(target_product, run(0, rank), swept))) {
    return false;
  }
  // Whether run [first, end) is element e at every probe.
  const auto is_element = [&](int first, int end, size_t e) {
    const auto numbers = unfitted.find(e);
    if (numbers == unfitted.end()) return equal_at(run(first, end), elements[e], plan.points);
    const SizeExpr product = run(first, end);
    try {
      for (size_t p = 0; p < plan.points.size(); ++p) {
        if (product.evaluate(plan.points[p], "a reshape") != numbers->second[p]) return false;
      }
    } catch (const Error&) {
      return false;
    }
    return true;
  };

  // Every alignment, element by element (the run [starts[e], starts[e +
  // 1])), and what each gives the fixed elements. Dimensions of size 1 can
  // make several: then which element follows which dimension is not known
  // (the caller refuses the reshape) unless they all say the same.
  std::vector<int> starts{0};
  std::optional<std::vector<SymbolicAttr>> found;
  bool ambiguous = false;
  const auto same = [](const std::vector<SymbolicAttr>& x, const std::vector<SymbolicAttr>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].element != y[i].element || !(x[i].size == y[i].size)) return false;
    }
    return true;
  };
  const std::function<void(size_t)> align = [&](size_t e) {
    const int first = starts.back();
    if (e == target.size()) {
      if (first != rank) return;
      std::vector<SymbolicAttr> added;
      SizeExpr aligned_product = SizeExpr::constant(1);
      for (size_t k = 0; k < target.size(); ++k) {
        SizeExpr size = run(starts[k], starts[k + 1]);
        aligned_product = aligned_product * size;
        if ((unfitted.contains(k) || elements[k].is_constant()) && !size.is_constant()) {
          added.push_back({static_cast<int>(n), "shape", static_cast<int>(k), std::move(size)});
        }
      }
      if (added.empty() || !equal_at(aligned_product, run(0, rank), swept)) return;
      for (size_t k = 0; k < target.size(); ++k) {
        const bool assigned = std::any_of(added.begin(), added.end(), [&](const SymbolicAttr& a) {
          return a.element == static_cast<int>(k);
        });
        if (unfitted.contains(k) && !assigned) return;
      }
      if (found && !same(*found, added)) ambiguous = true;
      found = std::move(added);
      return;
    }
    for (int end = first; end <= rank; ++end) {
      if (end == first && target[e] != 1) continue;
      if (!is_element(first, end, e)) continue;
      starts.push_back(end);
      align(e + 1);
      starts.pop_back();
    }
  };
  align(0);
  if (!found || ambiguous) return false;
  symbolic.attrs.insert(symbolic.attrs.end(), found->begin(), found->end());
  return true;
}

// Throws unless the fitted shapes hold at sizes the grid did not visit
// (defined below).
void check_beyond_the_grid(const ProbePlan& plan, const Graph& graph, SymbolicShapes& symbolic,
                           absl::Span<const std::string> sources);

}  // namespace

std::string values_text(const SymbolValues& values) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : values) parts.push_back(str_cat(name, " = ", value));
  return absl::StrJoin(parts, ", ");
}

const SizeExpr* SymbolicShapes::dim(ValueId value, int axis) const {
  auto it = std::lower_bound(dims.begin(), dims.end(), std::pair(value, axis),
                             [](const SymbolicDim& d, const std::pair<ValueId, int>& key) {
                               return std::pair(d.value, d.axis) < key;
                             });
  return it != dims.end() && it->value == value && it->axis == axis ? &it->size : nullptr;
}

std::vector<std::string> SymbolicShapes::symbols() const {
  std::vector<std::string> names;
  for (const SymbolicDim& d : dims) {
    for (std::string& name : d.size.symbols()) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string SymbolicShapes::shape_text(const Graph& graph, ValueId value) const {
  const Shape& shape = graph.value(value).shape;
  std::vector<std::string> parts;
  for (int a = 0; a < shape.rank(); ++a) {
    const SizeExpr* size = dim(value, a);
    parts.push_back(size ? size->to_string() : std::to_string(shape[a]));
  }
  return str_cat("[", absl::StrJoin(parts, ", "), "]");
}

ProbePlan plan_probes(const SymbolValues& example) {
  TANDEM_CHECK(example.size() <= kMaxSymbols, "at most ", kMaxSymbols,
               " named free dimensions are supported, got ", example.size(), " (",
               values_text(example), ")");
  ProbePlan plan;
  for (const auto& [name, value] : example) plan.symbols.push_back(name);
  const size_t corners = size_t{1} << example.size();
  plan.points.resize(corners + 3, example);
  for (const auto& [name, value] : example) {
    const int64_t step = value >= 4 ? -1 : 1;
    for (size_t m = 0; m < corners; ++m) {
      const size_t s = static_cast<size_t>(
          std::find(plan.symbols.begin(), plan.symbols.end(), name) - plan.symbols.begin());
      if ((m >> s) & 1) plan.points[m][name] = value + step;
    }
    plan.points[corners][name] = value + 2 * step;
    for (const auto& [k, far] : {std::pair<size_t, int64_t>{1, 5}, {2, 17}}) {
      plan.points[corners + k][name] = value - far >= 2 ? value - far : value + far;
    }
  }
  return plan;
}

void ProbePlan::drop_check(size_t point) {
  TANDEM_INTERNAL_ASSERT(point >= first_extra_check() && point < points.size(),
                         "only extra check points can be dropped");
  points.erase(points.begin() + static_cast<std::ptrdiff_t>(point));
}

SymbolicShapes fit_symbolic_shapes(const ProbePlan& plan, absl::Span<const Graph> graphs,
                                   absl::Span<const std::string> sources) {
  TANDEM_INTERNAL_ASSERT(graphs.size() == plan.points.size(), "one graph per probe point");
  check_same_structure(plan, graphs, sources);
  const Graph& g0 = graphs[0];
  SymbolicShapes symbolic;
  std::vector<int64_t> numbers(graphs.size());

  // Captured tensors are read live and written as they are: one that follows
  // the dimensions was made by host code the graph cannot rerun.
  std::vector<bool> is_state(g0.values.size(), false);
  for (const GraphInput& input : g0.inputs) is_state[input.value] = input.kind != InputKind::kData;
  struct InSteps {
    ValueId id;
    int axis;
    std::string why_not_a_polynomial;
  };
  std::vector<InSteps> in_steps;

  for (size_t v = 0; v < g0.values.size(); ++v) {
    const ValueId id = static_cast<ValueId>(v);
    for (int a = 0; a < g0.values[v].shape.rank(); ++a) {
      for (size_t p = 0; p < graphs.size(); ++p) numbers[p] = graphs[p].values[v].shape[a];
      const int node = g0.values[v].node;
      const std::string what = node >= 0
                                   ? str_cat("dimension ", a, " of the output of ",
                                             node_text(g0, static_cast<size_t>(node), sources))
                                   : str_cat("dimension ", a, " of graph input ", id);
      std::optional<SizeExpr> size;
      try {
        size = fit(plan, numbers, what);
      } catch (const Error& e) {
        // An op's output may move in steps (a floor division), which shape
        // inference tells once the attributes are fitted.
        if (node < 0) throw;
        in_steps.push_back({id, a, e.message()});
        continue;
      }
      if (!size) continue;
      if (is_state[v]) {
        std::string name;
        for (const GraphInput& input : g0.inputs) name = input.value == id ? input.name : name;
        throw Error(str_cat("the traced code captured tensor '", name, "' of shape ",
                            g0.values[v].shape.to_string(),
                            " whose size follows the free "
                            "dimensions (",
                            size->to_string(),
                            "): it was made on the host (e.g. "
                            "Tensor::from_vector), which a graph cannot redo at other sizes; make "
                            "it with ops (arange, full, tril_mask) from the input's shape"));
      }
      symbolic.dims.push_back({id, a, std::move(*size)});
    }
  }

  for (size_t n = 0; n < g0.nodes.size(); ++n) {
    const auto& items = g0.nodes[n].attrs.items();
    // A reshape's target elements no polynomial gave, with their numbers,
    // and the first error.
    std::map<size_t, std::vector<int64_t>> reshape_unfitted;
    std::optional<std::string> reshape_error;
    for (size_t k = 0; k < items.size(); ++k) {
      const auto& [name, value] = items[k];
      const std::string what = str_cat("attribute '", name, "' of ", node_text(g0, n, sources));
      auto attr_of = [&](size_t p) -> const kernels::AttrValue& {
        return graphs[p].nodes[n].attrs.items()[k].second;
      };
      if (std::holds_alternative<int64_t>(value)) {
        for (size_t p = 0; p < graphs.size(); ++p) numbers[p] = std::get<int64_t>(attr_of(p));
        if (auto size = fit(plan, numbers, what)) {
          symbolic.attrs.push_back({static_cast<int>(n), name, -1, std::move(*size)});
        }
      } else if (std::holds_alternative<double>(value)) {
        // A double that counts (arange's stop) is a size; any other that
        // changes with the sizes (a mean's 1/n) has no expression.
        bool integral = true, same = true;
        for (size_t p = 0; p < graphs.size(); ++p) {
          const double x = std::get<double>(attr_of(p));
          same = same && (x == std::get<double>(value) ||
                          (std::isnan(x) && std::isnan(std::get<double>(value))));
          integral = integral && x == std::trunc(x) && std::abs(x) < 9.0e15;
          numbers[p] = integral ? static_cast<int64_t>(x) : 0;
        }
        if (same) continue;
        TANDEM_CHECK(integral, what, " changes with the free dimensions (", std::get<double>(value),
                     " at ", values_text(plan.points[0]), ", ", std::get<double>(attr_of(1)),
                     " at ", values_text(plan.points[1]),
                     ") and is no whole number, so no size expression gives it; compute it "
                     "with ops from the input's shape");
        if (auto size = fit(plan, numbers, what)) {
          symbolic.attrs.push_back({static_cast<int>(n), name, -1, std::move(*size)});
        }
      } else if (std::holds_alternative<std::vector<int64_t>>(value)) {
        const size_t count = std::get<std::vector<int64_t>>(value).size();
        for (size_t e = 0; e < count; ++e) {
          for (size_t p = 0; p < graphs.size(); ++p) {
            numbers[p] = std::get<std::vector<int64_t>>(attr_of(p))[e];
          }
          std::optional<SizeExpr> size;
          try {
            size = fit(plan, numbers, str_cat(what, " (element ", e, ")"));
          } catch (const Error& error) {
            // A reshape back after an op whose output moves in steps:
            // reconcile_reshape below gives it the input's expression.
            if (g0.nodes[n].op != &kernels::reshape_op()) throw;
            reshape_unfitted[e] = numbers;
            if (!reshape_error) reshape_error = error.message();
          }
          if (size) {
            symbolic.attrs.push_back(
                {static_cast<int>(n), name, static_cast<int>(e), std::move(*size)});
          }
        }
      }
    }
    find_slice_limits(g0, symbolic, n);
    if (!reconcile_reshape(plan, g0, symbolic, n, reshape_unfitted) && reshape_error) {
      throw Error(std::move(*reshape_error));
    }
    // This node's outputs that move in steps, now that its attributes (and
    // those of the nodes before it) are known.
    for (InSteps& d : in_steps) {
      if (g0.value(d.id).node != static_cast<int>(n)) continue;
      std::optional<SizeExpr> size = derive_dim(plan, g0, symbolic, sources, d.id, d.axis);
      if (!size) throw Error(std::move(d.why_not_a_polynomial));
      set_dim(symbolic, d.id, d.axis, std::move(*size));
    }
  }
  check_beyond_the_grid(plan, g0, symbolic, sources);
  return symbolic;
}

SymbolValues bind_symbols(const Graph& graph, const SymbolicShapes& symbolic,
                          absl::Span<const Shape> data_shapes) {
  // Called on every run of a loaded model: messages are formatted only when
  // a check fails.
  SymbolValues values;
  // The first data input that names `name` (for a message).
  const auto first_naming = [&](const std::string& name) {
    for (const SymbolicDim& d : symbolic.dims) {
      if (d.size.as_symbol() == name && graph.value(d.value).node < 0) {
        for (const GraphInput& input : graph.inputs) {
          if (input.value == d.value) return input.name;
        }
      }
    }
    return std::string();
  };
  size_t data = 0;
  for (const GraphInput& input : graph.inputs) {
    if (input.kind != InputKind::kData) continue;
    if (data == data_shapes.size()) break;  // The rest follow from these.
    const Shape& shape = data_shapes[data++];
    const Shape& traced = graph.value(input.value).shape;
    TANDEM_CHECK(shape.rank() == traced.rank(), "input '", input.name, "' must have shape ",
                 symbolic.shape_text(graph, input.value), ", got ", shape.to_string());
    for (int a = 0; a < shape.rank(); ++a) {
      const SizeExpr* size = symbolic.dim(input.value, a);
      if (size == nullptr) {
        TANDEM_CHECK(shape[a] == traced[a], "input '", input.name, "' must have shape ",
                     symbolic.shape_text(graph, input.value), ", got ", shape.to_string(),
                     ": dimension ", a, " is fixed at ", traced[a]);
        continue;
      }
      const std::string name = size->as_symbol();
      TANDEM_INTERNAL_ASSERT(!name.empty(), "a data input's free dimension is a name");
      auto [it, inserted] = values.emplace(name, shape[a]);
      TANDEM_CHECK(inserted || it->second == shape[a], "input '", input.name, "' has ", name, " = ",
                   shape[a], " (shape ", shape.to_string(), ") but input '", first_naming(name),
                   "' has ", name, " = ", it->second, "; a named dimension has one size");
    }
  }
  return values;
}

namespace {

// infer_at, with the map from `graph`'s value ids to the result's, and
// `after_node` called as each node is inferred.
Graph infer_at(const Graph& graph, const SymbolicShapes& symbolic, const SymbolValues& values,
               absl::Span<const std::string> sources, std::vector<ValueId>& renumber,
               const AfterNode& after_node = {}) {
  std::vector<kernels::Attrs> attrs;
  attrs.reserve(graph.nodes.size());
  for (const Node& node : graph.nodes) attrs.push_back(node.attrs);
  for (const SymbolicAttr& a : symbolic.attrs) {
    const size_t n = static_cast<size_t>(a.node);
    const int64_t size = a.size.evaluate(values, node_text(graph, n, sources));
    kernels::Attrs& target = attrs[n];
    const kernels::AttrValue* old = target.find(a.attr);
    TANDEM_INTERNAL_ASSERT(old != nullptr, "a symbolic attribute the node lacks");
    if (std::holds_alternative<std::vector<int64_t>>(*old)) {
      std::vector<int64_t> ints = std::get<std::vector<int64_t>>(*old);
      ints[static_cast<size_t>(a.element)] = size;
      target.set(a.attr, std::move(ints));
    } else if (std::holds_alternative<double>(*old)) {
      target.set(a.attr, static_cast<double>(size));
    } else {
      target.set(a.attr, size);
    }
  }
  std::vector<Shape> data_shapes;
  for (const GraphInput& input : graph.inputs) {
    if (input.kind != InputKind::kData) continue;
    const Shape& traced = graph.value(input.value).shape;
    Shape::Dims dims(traced.begin(), traced.end());
    for (int a = 0; a < traced.rank(); ++a) {
      if (const SizeExpr* size = symbolic.dim(input.value, a)) {
        dims[static_cast<size_t>(a)] = size->evaluate(values, str_cat("input '", input.name, "'"));
      }
    }
    data_shapes.emplace_back(absl::MakeConstSpan(dims));
  }
  return reinfer(graph, data_shapes, attrs, sources, values_text(values), renumber, after_node);
}

// Value `id` of `graph`, described, if `inferred` (its shape at `values`)
// is not what its expression says; nullopt if it is.
std::optional<std::string> value_mismatch(const Graph& graph, const SymbolicShapes& symbolic,
                                          const SymbolValues& values, ValueId id,
                                          const Shape& inferred,
                                          absl::Span<const std::string> sources) {
  const Shape& traced = graph.value(id).shape;
  bool as_expected = inferred.rank() == traced.rank();
  for (int a = 0; as_expected && a < traced.rank(); ++a) {
    const SizeExpr* size = symbolic.dim(id, a);
    as_expected = inferred[a] == (size ? size->evaluate(values, "a shape") : traced[a]);
  }
  if (as_expected) return std::nullopt;
  const int node = graph.value(id).node;
  return str_cat(node >= 0 ? node_text(graph, static_cast<size_t>(node), sources)
                           : std::string("a graph input"),
                 " gives shape ", inferred.to_string(), " where the trace says ",
                 symbolic.shape_text(graph, id));
}

std::optional<SizeExpr> derive_dim(const ProbePlan& plan, const Graph& graph,
                                   const SymbolicShapes& symbolic,
                                   absl::Span<const std::string> sources, ValueId id, int axis) {
  const int node = graph.value(id).node;
  TANDEM_INTERNAL_ASSERT(node >= 0, "a derived size is a node's output");
  struct Found {};
  const SizeOracle size_at = [&](const SymbolValues& values) -> std::optional<int64_t> {
    std::optional<int64_t> size;
    std::vector<ValueId> renumber;
    try {
      for (const SizeLimit& limit : symbolic.limits) {
        if (limit.size.evaluate(values, "a limit") > limit.max) return std::nullopt;
      }
      infer_at(graph, symbolic, values, sources, renumber, [&](size_t n, const Graph& out) {
        if (n != static_cast<size_t>(node)) return;
        size = out.value(renumber[id]).shape[axis];
        throw Found{};
      });
    } catch (const Found&) {
    } catch (const Error&) {
    }
    return size;
  };
  SymbolValues last;
  for (const std::string& name : plan.symbols) last[name] = sweep_end(plan, name);
  return search_size(size_at, plan.points[0], last);
}

// A size can look fixed over the grid and not be (a floor division: a
// stride-3 pool's output is the same at three neighbouring lengths), and
// the grid's check point only catches what moves there. So each free
// dimension is swept alone, from 1 to sweep_end, with the graph inferred
// again at each size (no tracing): sizes its ops refuse or a limit
// excludes are skipped, as eager code would refuse them too. A shape other
// than the fitted one is an Error: a size the grid saw fixed may have fed
// attributes the model's code computed from it (an upsampling's output
// size), which the grid then also saw fixed, so no expression found for
// the size alone would make the graph follow. (A reshape, which keeps the
// number of elements, is the exception: reconcile_reshape.)
void check_beyond_the_grid(const ProbePlan& plan, const Graph& graph, SymbolicShapes& symbolic,
                           absl::Span<const std::string> sources) {
  for (const std::string& name : plan.symbols) {
    const int64_t last = sweep_end(plan, name);
    for (int64_t size = 1; size <= last; ++size) {
      SymbolValues values = plan.points[0];
      values[name] = size;
      bool within_limits = true;
      for (const SizeLimit& limit : symbolic.limits) {
        within_limits = within_limits && limit.size.evaluate(values, "a limit") <= limit.max;
      }
      if (!within_limits) continue;
      // Node by node, so that a mis-fitted size is found before a later
      // node refuses the shapes it leads to.
      struct Found {};
      std::optional<std::string> mismatch;
      std::vector<ValueId> renumber;
      size_t inferred = 0;  // Nodes inferred at this size.
      const auto check_node = [&](size_t n, const Graph& out) {
        inferred = n + 1;
        for (ValueId id : graph.nodes[n].outputs) {
          mismatch =
              value_mismatch(graph, symbolic, values, id, out.value(renumber[id]).shape, sources);
          if (mismatch) throw Found{};
        }
      };
      try {
        infer_at(graph, symbolic, values, sources, renumber, check_node);
      } catch (const Found&) {
      } catch (const Error& e) {
        // A reshape to a size the grid saw fixed, of an input whose size
        // was found to move: its target follows; this size again. Model
        // code reshapes to sizes it reads off shapes, so a reshape that
        // cannot follow is this graph's failure, not the model's.
        if (inferred < graph.nodes.size() && graph.nodes[inferred].op == &kernels::reshape_op()) {
          if (reconcile_reshape(plan, graph, symbolic, inferred)) {
            --size;
            continue;
          }
          throw Error(str_cat("at ", values_text(values), ", ", e.message(),
                              "; its target, traced at ", values_text(plan.points[0]),
                              " and near it, does not follow ", name,
                              " (a size read off a shape that moves in steps), so no one graph "
                              "follows it"));
        }
        continue;  // Sizes the model's ops refuse, as eager code would.
      }
      if (mismatch) {
        throw Error(str_cat("at ", values_text(values), ", ", *mismatch,
                            " from the sizes traced at ", values_text(plan.points[0]),
                            " and near it: a size that follows ", name,
                            " in steps (a floor division, such as a strided convolution's or "
                            "pooling's output length), which no one graph follows"));
      }
    }
  }
}

}  // namespace

Graph infer_at(const Graph& graph, const SymbolicShapes& symbolic, const SymbolValues& values,
               absl::Span<const std::string> sources) {
  std::vector<ValueId> renumber;
  return infer_at(graph, symbolic, values, sources, renumber);
}

Graph instantiate(const Graph& graph, const SymbolicShapes& symbolic, const SymbolValues& values,
                  absl::Span<const std::string> sources) {
  const std::string at = values_text(values);
  for (const SizeLimit& limit : symbolic.limits) {
    const int64_t size = limit.size.evaluate(values, "a limit");
    TANDEM_CHECK(size <= limit.max, limit.size.to_string(), " = ", size, " is more than the model ",
                 "allows: the trace found ", limit.size.to_string(), " <= ", limit.max, " at ",
                 node_text(graph, static_cast<size_t>(limit.node), sources),
                 ", which takes that many rows of a table of ", limit.max, " (at ", at, ")");
  }
  std::vector<ValueId> renumber;
  Graph out = infer_at(graph, symbolic, values, sources, renumber);
  for (size_t v = 0; v < graph.values.size(); ++v) {
    const ValueId id = static_cast<ValueId>(v);
    const std::optional<std::string> mismatch =
        value_mismatch(graph, symbolic, values, id, out.value(renumber[v]).shape, sources);
    TANDEM_CHECK(!mismatch, "at ", at, ", ", mismatch.value_or(""),
                 ": the model computes something else at these sizes than what was traced, so "
                 "they are refused");
  }
  return out;
}

}  // namespace tandem::trace
