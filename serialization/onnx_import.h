// ONNX models in: a file that PyTorch (or any ONNX producer) exported runs
// as a Tandem model, with the same passes and kernels as a model Tandem
// exported itself.
//
//   tandem::LoadedModel model = tandem::import_onnx("resnet18.onnx");
//   std::vector<Tensor> y = model.run({images});   // any batch, if the file leaves it free
//   model.export_model("resnet18");                // Tandem's JSON + params, to read or diff
//
// The ONNX graph becomes Tandem's graph IR (serialization/onnx_ops.h says
// how each op does): initializers become parameters, what is computed from
// them and from the inputs' sizes alone (shape subgraphs) is computed at
// import, and dimensions the file leaves free (a dim_param such as
// "batch", or no size at all) become free dimensions: the graph is built
// at a few sizes of them and fitted as an export's traces are
// (trace/symbolic_shapes.h). Then the model loads as tandem::load's does:
// the inference passes run, and new sizes instantiate the graph.
//
// Opsets 1 to 17 of the standard domain (ONNX 1.12). Everything Tandem
// cannot express (an op, an attribute value, a dtype, a size known only when
// the model runs) is refused: the tandem::Error lists every such node of the
// file, each with its op type, name, the opset and the reason. A file is
// trusted no more than a graph file (serialization/onnx_file.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

#include "serialization/model.h"

namespace tandem {

struct OnnxImportOptions {
  // The size each free dimension is built at (others then instantiate);
  // a name not given gets kDefaultFreeSize. Names are the file's
  // dim_params, or "<input>_<axis>" for a dimension it leaves unnamed.
  std::map<std::string, int64_t> example_sizes;
  static constexpr int64_t kDefaultFreeSize = 4;
  // Inputs whose values are fixed at import: each becomes a constant of
  // the model, which no longer takes it. For inputs an op needs as values
  // to build the graph (a Reshape's shape, a Resize's sizes given as
  // inputs): an import that needs one names it, and the model imported
  // with it bound is specialized to that value.
  std::map<std::string, Tensor> known_inputs;
};

// Reads the ONNX model at `path`; its external data must lie in its folder.
LoadedModel import_onnx(const std::string& path, const OnnxImportOptions& options = {});

// The same from a file image in memory (no external data); `display_name`
// names it in messages.
LoadedModel import_onnx(absl::Span<const uint8_t> bytes, std::string_view display_name,
                        const OnnxImportOptions& options = {});

namespace serialization {

// An imported model before it is loaded: the graph, the tensor of each of
// its state inputs, what follows the free dimensions, and each node's ONNX
// node. import_onnx loads it with load_graph (serialization/model.h); the
// fuzz target checks its size first.
struct OnnxGraph {
  trace::Graph graph;
  std::vector<StateInput> state;
  trace::SymbolicShapes symbolic;
  std::vector<std::string> sources;
  std::string name;
};

// import_onnx's first half, from a file image (no external data).
OnnxGraph read_onnx(absl::Span<const uint8_t> bytes, std::string_view display_name,
                    const OnnxImportOptions& options = {});

}  // namespace serialization
}  // namespace tandem
