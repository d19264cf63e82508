// export_model's proof (ExportOptions::check in serialization/model.h): the
// files an export leaves compute what the eager model computes, read back
// the way a deployment reads them.
//
//   check_export([&](const std::string& to) { export_graph(to, graph, state, symbolic); },
//                graph, eager_function, "export_model('cnn')");   // throws if they differ
//   export_graph(path, graph, state, symbolic);                   // only then the real files
//
// The check has `write` put a trial copy of the model in a scratch folder,
// loads it with tandem::load (so the loader's own optimization of the graph
// runs too, as in a deployed program), runs one example through the loaded
// model and through the eager function, and compares every output. When
// they differ it finds where: the first node of the exported graph whose
// value changes once the loader optimizes the graph (a pass that is wrong on
// an already optimized graph), or else the node that made the differing
// output (a graph that was wrong as exported). The scratch folder is removed
// either way; the real destination is never touched. A model with free
// dimensions is compared again at `other_shapes` (one shape per data input,
// per check), sizes the trace never saw.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "core/tensor.h"
#include "serialization/model.h"
#include "trace/graph.h"

namespace tandem {

// `graph`: the graph `write` exports, whose data inputs give the example's
// shapes and dtypes (normal floats from a fixed seed, leaving the global
// generator alone; zeros for integer and bool inputs, valid indices for any
// embedding). `eager`: the function the graph was traced from, called once
// on the example. Throws tandem::Error unless every output agrees within
// float32 rounding of the outputs' scale; the message starts with `what`,
// names the output, element and both values, and the node where the two
// part with its traced line.
// `read` loads the trial copy (default: tandem::load; an ONNX export reads
// it back with tandem::import_onnx).
void check_export(const std::function<void(const std::string& path)>& write,
                  const trace::Graph& graph,
                  const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& eager,
                  const std::string& what, absl::Span<const std::vector<Shape>> other_shapes = {},
                  const std::function<LoadedModel(const std::string& path)>& read = nullptr);

}  // namespace tandem
