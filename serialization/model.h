// Export and load: a traced model as two files, and back as a runnable model
// in a program that has none of the model's code.
//
//   net->hybridize();
//   net->forward(x);                         // traces
//   net->export_model("cnn");                // cnn.json and cnn.<checksum>.params
//
//   // Elsewhere, linking only core, kernels, trace and serialization:
//   tandem::LoadedModel model = tandem::load("cnn.json");
//   std::vector<Tensor> y = model.run({images});   // any batch size
//
// The graph file holds the optimized inference graph (serialization/
// FORMAT.md) and names its params file, which holds every parameter, buffer
// and folded constant: "cnn.1a2b3c4d.params", named after its contents so
// that an export killed at any instant leaves the old model or the new one
// (Note [Exporting two files] in serialization/model.cc).
// Loading checks both files completely before anything runs (a bad file is a
// tandem::Error naming the file, the place and the problem), turns the
// parameters into constants of the graph, runs the inference passes (batch
// norm folded into the convolution weights, and so on) and builds the
// executor. New sizes of the free dimensions (ExportOptions::dynamic_dims)
// instantiate the graph for them (trace/symbolic_shapes.h) and plan it
// again, a few cached per model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

#include "core/tensor.h"
#include "serialization/graph_file.h"
#include "serialization/params.h"
#include "trace/graph.h"

namespace tandem {

// Per data input name ("input0"), axis -> the name of a free dimension:
// {{"input0", {{0, "batch"}, {1, "seq"}}}}. Axes may count from the end
// (-1); one name on several inputs is one size.
using FreeDims = std::map<std::string, std::map<int, std::string>>;

struct ExportOptions {
  // Dimension 0 of every data input (of rank >= 1) is "batch"; a loaded
  // model accepts any size there. Off, and no dynamic_dims: the loaded model
  // takes exactly the traced shapes.
  bool dynamic_batch = true;
  // The free dimensions by name, in place of dynamic_batch's when given.
  // The export traces the model at a few other sizes and fits every size in
  // the graph as an expression of these names (trace/symbolic_shapes.h);
  // code that no such graph can follow is refused at export, naming the node.
  FreeDims dynamic_dims = {};
  // Module::export_model and HybridFunction::export_model first write a
  // trial copy, load it as a deployment would and compare one example's
  // outputs with the eager model's; files whose answers differ are never
  // written (eager/export_check.h). Off: write without the check (one
  // model call and one load cheaper).
  bool check = true;
  // What is written: Tandem's graph JSON and params file (`path`.json and
  // its params file), or one ONNX file at `path` (serialization/
  // onnx_export.h), which the check reads back with tandem::import_onnx.
  enum class Format { kTandem, kOnnx };
  Format format = Format::kTandem;
};

namespace serialization {

// What the exporter knows about one kState input of the graph.
struct StateInput {
  std::string name;
  Tensor tensor;
  InputRole role = InputRole::kParameter;
};

// Writes `path`.json and, beside it, `path`.<8 hex digits>.params for
// `graph`, whose kState inputs are `state` (in order), and whose kConstant
// inputs are written as constant params. The graph must have no state writes
// of its own (an inference graph). The pair is replaced atomically: a process
// killed at any instant leaves the old model or the new one, and the params
// file of the old one is removed once the new graph file is in place (Note
// [Exporting two files] in serialization/model.cc). The final component of
// `path` with its extensions must be a valid file name (file_name.h); a graph
// file that is a symbolic link is written through and stays a link, and
// permission bits are kept (Note [Atomic writes] in file_io.h).
// `symbolic` says what depends on the free dimensions (empty: none).
void export_graph(const std::string& path, const trace::Graph& graph,
                  absl::Span<const StateInput> state, const trace::SymbolicShapes& symbolic = {});

// The graph file export_graph writes, without the params file's name and
// index: `params` gets its tensors, in order. `what` names the model in
// messages; `node_sources` says where each node came from (empty: the
// nodes' own source lines).
GraphFile graph_file_of(const trace::Graph& graph, absl::Span<const StateInput> state,
                        const trace::SymbolicShapes& symbolic, std::vector<NamedTensor>& params,
                        std::string_view what, std::vector<std::string> node_sources = {});

}  // namespace serialization

// A model loaded from a graph file and its params file.
class LoadedModel {
 public:
  struct TensorSpec {
    std::string name;
    DType dtype = DType::kFloat32;
    Shape shape;  // As traced.
    // Per dimension, its size's expression where it is free ("batch",
    // "batch*seq"), "" where it is fixed.
    std::vector<std::string> free_dims;
    bool is_dynamic() const;
    // "[batch, seq, 64]".
    std::string shape_text() const;
  };

  LoadedModel();
  ~LoadedModel();
  LoadedModel(LoadedModel&&) noexcept;
  LoadedModel& operator=(LoadedModel&&) noexcept;

  // Runs the model on one tensor per data input, in the order of inputs().
  // Throws tandem::Error naming the input whose dtype, rank or size differs
  // from the signature, or the dimension whose size breaks a limit the
  // trace found (seq <= max_len). Returns one tensor per output, without waiting.
  // Safe to call from several threads.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs,
                          std::source_location where = std::source_location::current()) const;

  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  // The graph and manifest as the file states them.
  const serialization::GraphFile& file() const;
  // Writes the model again, as export_graph does: the same bytes the files
  // it was loaded from hold when Tandem wrote them, the params file's name
  // apart (older versions named it `path`.params).
  void export_model(const std::string& path) const;
  // The same graph as an ONNX file (serialization/onnx_export.h).
  void export_onnx(const std::string& path) const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  friend LoadedModel load(serialization::GraphFile graph_file, serialization::ParamsFile params,
                          std::string_view name);
};

// The model export_graph then load() would give, without files: for graphs
// built in memory (an imported ONNX model, serialization/onnx_import.h).
// `name` stands for the model's file in messages.
LoadedModel load_graph(const trace::Graph& graph, absl::Span<const serialization::StateInput> state,
                       const trace::SymbolicShapes& symbolic, std::vector<std::string> node_sources,
                       std::string_view name);

// Loads `path` (a graph file; ".json" is appended if `path` has no such
// file) and the params file it names, which must lie in the same folder and
// be a regular file, not a symbolic link.
LoadedModel load(const std::string& path);

// The same from the two files already read and checked on their own
// (parse_graph_json, and read_params or parse_params): checks that the
// params file is the one the graph file's manifest describes, and that each
// tensor is the CPU tensor of its entry, then builds the model. `name`
// stands for the graph file's path in messages, and its folder for the
// params file's. For programs that hold a model's files in memory (and the
// loaders' fuzz targets).
LoadedModel load(serialization::GraphFile graph_file, serialization::ParamsFile params,
                 std::string_view name);

}  // namespace tandem
