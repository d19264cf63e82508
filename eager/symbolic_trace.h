// An inference function traced once per free-dimension probe and fitted to
// one graph for every size (trace/symbolic_shapes.h): what export_model
// writes when dimensions are free (ExportOptions::dynamic_dims).
//
//   SymbolicTrace t = trace_symbolic(fn, {{Shape{8, 100}, DType::kInt64, Device::cpu()}},
//                                    {{"input0", {{0, "batch"}, {1, "seq"}}}},
//                                    "export_model('lm')");
//   t.graph;      // as traced at the example, [8, 100]
//   t.symbolic;   // what in it depends on batch and seq
//
// The function runs under NoGradGuard on zeros of each probe's shapes, with
// the random generator restored before each call and after the last, so
// that the traces differ only in sizes. fit_free_dims is the same fit over
// any way of tracing (hybridize traces whole training steps with it).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "serialization/model.h"
#include "trace/graph.h"
#include "trace/symbolic_shapes.h"

namespace tandem {

struct InputExample {
  Shape shape;
  DType dtype = DType::kFloat32;
  Device device = Device::cpu();
  bool requires_grad = false;  // The probes' zeros require grad too.
};

struct SymbolicTrace {
  trace::Graph graph;         // Traced at the example's shapes; inputs "input<i>".
  std::vector<Tensor> state;  // The tensor of each kState input, in order.
  trace::SymbolicShapes symbolic;
  trace::ProbePlan plan;             // plan.points[0]: the example's sizes.
  std::vector<std::string> sources;  // Per node of `graph`, its traced line ("net.cc:42").
};

// Throws tandem::Error starting with `what` for a name or axis that fits no
// input, one name given two sizes by the example, a probe the function
// refuses (naming its sizes), a function that updates state, or what the
// fit refuses (trace/symbolic_shapes.h).
SymbolicTrace trace_symbolic(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<InputExample>& example, const FreeDims& free, const std::string& what);

// One call of a function traced: its graph and the tensor of each of the
// graph's state inputs, in order (trace::Trace's).
struct TracedCall {
  trace::Graph graph;
  std::vector<Tensor> state;
};
using TraceAt = std::function<TracedCall(const std::vector<Tensor>& inputs)>;

// Traces at each probe point of `free` (zeros of its shapes, in plan
// order; the first point, the example's own sizes, not again when
// `at_example` gives its call) and fits the graphs. Throws as
// trace_symbolic, the first trace's own errors unchanged, and for a state
// input whose tensor holds other values at other sizes (a scalar made on
// the host from a size, such as a mean's count): one graph cannot follow it.
SymbolicTrace fit_free_dims(const TraceAt& trace_at, const std::vector<InputExample>& example,
                            const FreeDims& free, const std::string& what,
                            std::optional<TracedCall> at_example = std::nullopt);

// The data shapes at one probe point.
std::vector<Shape> shapes_at(const SymbolicTrace& t, const trace::SymbolValues& values);

}  // namespace tandem
