// Free dimensions: one graph for every value of a model's named input
// dimensions (docs/ARCHITECTURE.md, "Free dimensions").
//
//   ProbePlan plan = plan_probes({{"batch", 8}, {"seq", 100}});
//   std::vector<Graph> traces = ...;   // the model traced at each plan.points[i]
//   SymbolicShapes symbolic = fit_symbolic_shapes(plan, traces, sources);
//   ...
//   SymbolValues at = bind_symbols(traces[0], symbolic, {Shape{2, 37}});   // batch 2, seq 37
//   Graph g = instantiate(traces[0], symbolic, at, sources);               // shapes for them
//
// A trace records numbers: a reshape of [8, 100, 64] to [800, 64] keeps 800
// whatever produced it. Tandem recovers what a number is a function of by
// tracing the model at a few values of its free dimensions (two values each,
// a full grid, plus check points) and fitting every size-like number (an
// integer attribute, each dimension of each value) with the polynomial of
// the dimensions that passes through the grid (SizeExpr). The check points
// must then agree, or the number is not such a polynomial: an op's output
// that moves in steps gets an expression with floor divisions from the
// ops' shape inference (size_search.h), a reshape's target follows its
// input, and anything else is refused, naming the node. A constant stays a
// constant: a reshape to [batch*seq, 64] keeps 64 even when seq happened to
// be 64 too, since the grid moves each dimension on its own.
//
// Instantiating evaluates the fitted attributes at the new values, infers
// every shape again through the ops' own inference, and compares each
// value's shape with its fitted expression: a graph that would compute
// something else at these values (a slice that clamps, seq > max_len) is an
// Error naming the dimension, the node and the traced line, never an answer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "trace/graph.h"
#include "trace/size_expr.h"

namespace tandem::trace {

// Dimension `axis` of `value` has size `size`; data inputs' free dimensions
// are single names.
struct SymbolicDim {
  ValueId value = -1;
  int axis = 0;
  SizeExpr size;
};

// Attribute `attr` of node `node` (element `element` of an "ints" value, or
// -1 for an "int" or "float" one) is `size`.
struct SymbolicAttr {
  int node = -1;
  std::string attr;
  int element = -1;
  SizeExpr size;
};

// `size` <= `max`: a limit the trace found at node `node` (a slice of a
// fixed-size table by a free dimension, e.g. positional encodings: seq <=
// max_len).
struct SizeLimit {
  SizeExpr size;
  int64_t max = 0;
  int node = -1;
};

struct SymbolicShapes {
  // Only what depends on a free dimension; all else is as traced.
  std::vector<SymbolicDim> dims;  // Ordered by value, then axis.
  std::vector<SymbolicAttr> attrs;
  std::vector<SizeLimit> limits;

  bool empty() const { return dims.empty(); }
  // The expression of `value`'s dimension `axis`, or nullptr if it is fixed.
  const SizeExpr* dim(ValueId value, int axis) const;
  // The free dimensions' names, sorted.
  std::vector<std::string> symbols() const;
  // "[batch, seq, 64]": `value`'s shape with its free sizes spelled.
  std::string shape_text(const Graph& graph, ValueId value) const;
};

// Where to trace: points[0] is the example; points[m] for m < 2^k moves
// symbol s (in name order) by one when bit s of m is set; point 2^k, every
// symbol moved by two, checks the fit, and so do the points after it, every
// symbol moved by 5 and by 17, which a size that moves in steps of up to 16
// (a strided convolution's length) cannot sit out, and the numbers model
// code computes from it neither. Values stay >= 2 where the example's are
// (moving down from 4 and up, up from below; the far points down where
// that stays >= 2): a size of 1 broadcasts, which a model's larger sizes do
// not. At most 4 names.
struct ProbePlan {
  std::vector<std::string> symbols;
  std::vector<SymbolValues> points;
  // Points past the first check point are extra checks: a tracer drops one
  // the model refuses (a limit such as seq <= max_len), with drop_check.
  size_t first_extra_check() const { return (size_t{1} << symbols.size()) + 1; }
  void drop_check(size_t point);
};
ProbePlan plan_probes(const SymbolValues& example);

// Fits `graphs` (traced at plan.points, in order; all of one structure)
// as described above. Throws tandem::Error naming the node, its op and
// `sources[node]` for a difference of structure between the traces, a
// number that is no polynomial of the free dimensions, or a captured tensor
// (a kState input) whose shape follows them.
SymbolicShapes fit_symbolic_shapes(const ProbePlan& plan, absl::Span<const Graph> graphs,
                                   absl::Span<const std::string> sources);

// The values of the free dimensions that `data_shapes` give: one per data
// input, in order, though trailing inputs whose sizes follow from the
// others' (a traced backward's seed) may be left out. Throws tandem::Error
// naming the input and the axis for a rank or fixed size that differs from
// `graph`'s, or a name two inputs give two values.
SymbolValues bind_symbols(const Graph& graph, const SymbolicShapes& symbolic,
                          absl::Span<const Shape> data_shapes);

// `graph` at `values`: attributes evaluated, every shape inferred again and
// checked against its expression. Throws tandem::Error naming the
// dimensions, the node and `sources[node]` for a limit exceeded, an op that
// refuses the new shapes, or a shape other than the expression says.
Graph instantiate(const Graph& graph, const SymbolicShapes& symbolic, const SymbolValues& values,
                  absl::Span<const std::string> sources);

// `graph` at `values` without instantiate's checks: attributes evaluated and
// every shape inferred again, values numbered inputs first, then node
// outputs in order. For graphs whose expressions are yet to be fitted (a
// file of an older version that marks only a batch).
Graph infer_at(const Graph& graph, const SymbolicShapes& symbolic, const SymbolValues& values,
               absl::Span<const std::string> sources);

// "batch = 8, seq = 100".
std::string values_text(const SymbolValues& values);

}  // namespace tandem::trace
