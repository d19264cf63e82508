#include "serialization/model.h"

#include <filesystem>
#include <list>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "core/error.h"
#include "serialization/batch_dim.h"
#include "serialization/file_io.h"
#include "trace/executor.h"
#include "trace/passes/pipeline.h"

namespace tandem {
namespace serialization {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> sources_of(const trace::Graph& graph) {
  std::vector<std::string> sources;
  for (const trace::Node& node : graph.nodes) {
    sources.push_back(node.where.line() == 0 ? std::string() : format_location(node.where));
  }
  return sources;
}

// Writes the params (in the order of the graph's non-data inputs) to
// `path`.params, then `file`, now pointing at them, to `path`.json.
void write_model_files(const std::string& path, GraphFile& file,
                       absl::Span<const NamedTensor> params) {
  const std::string params_path = path + ".params";
  file.params = write_params(params_path, params);
  file.params_file = fs::path(params_path).filename().string();
  AtomicFile json(path + ".json");
  json.write(write_graph_json(file));
  json.commit();
}

// The size of dimension 0 shared by every data input, which a dynamic batch
// needs.
int64_t traced_batch(const trace::Graph& graph, const std::string& path) {
  int64_t batch = -1;
  for (const trace::GraphInput& input : graph.inputs) {
    if (input.kind != trace::InputKind::kData) continue;
    const Shape& shape = graph.value(input.value).shape;
    TANDEM_CHECK(shape.rank() > 0, "export '", path, "': data input '", input.name,
                 "' is a scalar, so it has no batch dimension; export with "
                 "ExportOptions{.dynamic_batch = false}");
    TANDEM_CHECK(batch < 0 || shape[0] == batch, "export '", path, "': data input '", input.name,
                 "' has ", shape[0], " rows where an earlier one has ", batch,
                 ", so they share no batch dimension; export with "
                 "ExportOptions{.dynamic_batch = false}");
    batch = shape[0];
  }
  return batch;
}

std::vector<Shape> data_shapes_with_batch(const trace::Graph& graph, int64_t batch) {
  std::vector<Shape> shapes;
  for (const trace::GraphInput& input : graph.inputs) {
    if (input.kind != trace::InputKind::kData) continue;
    Shape::Dims dims(graph.value(input.value).shape.begin(), graph.value(input.value).shape.end());
    dims[0] = batch;
    shapes.emplace_back(absl::MakeConstSpan(dims));
  }
  return shapes;
}

}  // namespace

void export_graph(const std::string& path, const trace::Graph& traced,
                  absl::Span<const StateInput> state, const ExportOptions& options) {
  // Inputs in the file's order: data, then state, then constants (as params).
  trace::Graph graph = traced;
  GraphFile file;
  std::vector<trace::GraphInput> inputs;
  std::vector<NamedTensor> params;
  size_t next_state = 0;
  for (const trace::GraphInput& input : traced.inputs) {
    if (input.kind != trace::InputKind::kData) continue;
    inputs.push_back(input);
    file.inputs.push_back({InputRole::kData, {}});
  }
  for (const trace::GraphInput& input : traced.inputs) {
    if (input.kind != trace::InputKind::kState) continue;
    TANDEM_INTERNAL_ASSERT(next_state < state.size(), "export: fewer state tensors than inputs");
    const StateInput& s = state[next_state++];
    inputs.push_back({input.value, s.name, trace::InputKind::kState, Tensor()});
    file.inputs.push_back({s.role, {}});
    params.push_back({s.name, s.tensor});
  }
  TANDEM_INTERNAL_ASSERT(next_state == state.size(), "export: more state tensors than inputs");
  int next_constant = 0;
  for (const trace::GraphInput& input : traced.inputs) {
    if (input.kind != trace::InputKind::kConstant) continue;
    std::string name = str_cat("constant", next_constant++);
    inputs.push_back({input.value, name, trace::InputKind::kState, Tensor()});
    file.inputs.push_back({InputRole::kConstant, {}});
    params.push_back({name, input.constant});
  }
  absl::flat_hash_set<std::string> names;
  for (const trace::GraphInput& input : inputs) {
    TANDEM_CHECK(names.insert(input.name).second, "export '", path, "': two graph inputs are ",
                 "called '", input.name, "'");
  }
  graph.inputs = std::move(inputs);
  file.node_sources = sources_of(graph);

  if (options.dynamic_batch && !file.inputs.empty() && file.inputs[0].role == InputRole::kData) {
    const int64_t batch = traced_batch(graph, path);
    generalize_batch(graph, batch);
    // The proof: every op takes another batch size.
    try {
      with_input_shapes(graph, data_shapes_with_batch(graph, batch + 1), file.node_sources);
    } catch (const Error& e) {
      throw Error(str_cat("export '", path,
                          "': the graph does not work at other batch sizes: ", e.message(),
                          "; export with ExportOptions{.dynamic_batch = false} to fix the batch "
                          "size at ",
                          batch));
    }
    for (InputSpec& spec : file.inputs) {
      if (spec.role == InputRole::kData) spec.dynamic_dims = {0};
    }
  }
  file.graph = std::move(graph);
  file.producer = TANDEM_PRODUCER;
  write_model_files(path, file, params);
}

}  // namespace serialization

using serialization::GraphFile;
using serialization::InputRole;

struct LoadedModel::Impl {
  GraphFile file;
  std::string name;            // The graph file's path, for messages.
  std::vector<Tensor> params;  // Per non-data input, in order.
  std::vector<TensorSpec> inputs, outputs;
  int64_t traced_batch = -1;  // -1: no dynamic batch.

  // Executors by batch size, most recently used first.
  static constexpr size_t kCachedBatchSizes = 4;
  mutable std::mutex mutex;
  mutable std::list<std::pair<int64_t, std::shared_ptr<const trace::Executor>>> executors;

  std::shared_ptr<const trace::Executor> build(int64_t batch) const;
  std::shared_ptr<const trace::Executor> executor_for(int64_t batch) const;
};

std::shared_ptr<const trace::Executor> LoadedModel::Impl::build(int64_t batch) const {
  trace::Graph graph =
      batch == traced_batch
          ? file.graph
          : serialization::with_input_shapes(
                file.graph, serialization::data_shapes_with_batch(file.graph, batch),
                file.node_sources);
  // The parameters are fixed from here on: constants, for the passes to fold.
  size_t next = 0;
  for (trace::GraphInput& input : graph.inputs) {
    if (input.kind == trace::InputKind::kData) continue;
    input.kind = trace::InputKind::kConstant;
    input.constant = params[next++];
  }
  trace::optimize(graph, {.inference = true, .name = name});
  return std::make_shared<const trace::Executor>(std::move(graph));
}

std::shared_ptr<const trace::Executor> LoadedModel::Impl::executor_for(int64_t batch) const {
  std::lock_guard lock(mutex);
  for (auto it = executors.begin(); it != executors.end(); ++it) {
    if (it->first == batch) {
      executors.splice(executors.begin(), executors, it);
      return it->second;
    }
  }
  executors.emplace_front(batch, build(batch));
  if (executors.size() > kCachedBatchSizes) executors.pop_back();
  return executors.front().second;
}

LoadedModel::LoadedModel() = default;
LoadedModel::~LoadedModel() = default;
LoadedModel::LoadedModel(LoadedModel&&) noexcept = default;
LoadedModel& LoadedModel::operator=(LoadedModel&&) noexcept = default;

std::vector<Tensor> LoadedModel::run(const std::vector<Tensor>& inputs,
                                     std::source_location where) const {
  TANDEM_CHECK(impl_ != nullptr, "run() on a LoadedModel that holds no model (use tandem::load)");
  CallSiteScope site("model", where);
  const Impl& m = *impl_;
  TANDEM_CHECK(inputs.size() == m.inputs.size(), "model '", m.name, "' takes ", m.inputs.size(),
               " input", m.inputs.size() == 1 ? "" : "s", ", got ", inputs.size());
  int64_t batch = m.traced_batch;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = m.inputs[i];
    const Tensor& x = inputs[i];
    TANDEM_CHECK(x.defined(), "model input '", spec.name, "' is an undefined tensor");
    TANDEM_CHECK(x.dtype() == spec.dtype, "model input '", spec.name, "' must be ",
                 dtype_name(spec.dtype), ", got ", dtype_name(x.dtype()));
    TANDEM_CHECK(x.device() == Device::cpu(), "model input '", spec.name,
                 "' must be on the CPU, got ", x.device().to_string());
    bool fits = x.rank() == spec.shape.rank();
    for (int d = spec.dynamic_batch ? 1 : 0; fits && d < x.rank(); ++d) {
      fits = x.shape()[d] == spec.shape[d];
    }
    TANDEM_CHECK(fits, "model input '", spec.name, "' must have shape ",
                 spec.dynamic_batch ? "[N" : "", spec.dynamic_batch ? ", ..." : "",
                 spec.dynamic_batch ? "] with " : "", spec.shape.to_string(),
                 spec.dynamic_batch ? " past dimension 0" : "", ", got ", x.shape().to_string());
    if (spec.dynamic_batch) {
      if (i == 0) batch = x.shape()[0];
      TANDEM_CHECK(x.shape()[0] == batch, "model input '", spec.name, "' has batch size ",
                   x.shape()[0], " but '", m.inputs[0].name, "' has ", batch);
    }
  }
  return m.executor_for(batch)->run(inputs, {}, where);
}

const std::vector<LoadedModel::TensorSpec>& LoadedModel::inputs() const { return impl_->inputs; }
const std::vector<LoadedModel::TensorSpec>& LoadedModel::outputs() const { return impl_->outputs; }
const GraphFile& LoadedModel::file() const { return impl_->file; }

void LoadedModel::export_model(const std::string& path) const {
  GraphFile file = impl_->file;
  std::vector<serialization::NamedTensor> params;
  size_t next = 0;
  for (const trace::GraphInput& input : file.graph.inputs) {
    if (input.kind != trace::InputKind::kData)
      params.push_back({input.name, impl_->params[next++]});
  }
  serialization::write_model_files(path, file, params);
}

LoadedModel load(const std::string& path) {
  namespace fs = std::filesystem;
  std::string json_path = path;
  std::error_code ignored;
  if (!fs::exists(json_path, ignored) && fs::exists(json_path + ".json", ignored)) {
    json_path += ".json";
  }
  auto impl = std::make_shared<LoadedModel::Impl>();
  impl->name = json_path;
  impl->file = serialization::parse_graph_json(
      serialization::read_file(json_path, serialization::kMaxGraphFileBytes), json_path);
  GraphFile& file = impl->file;

  // The params file must be a regular file beside the graph file (the graph
  // parser already refused names with a folder in them), not a link.
  const fs::path params_path = fs::path(json_path).parent_path() / file.params_file;
  serialization::ParamsFile params = serialization::read_params(params_path.string(), true);
  // The manifest and the file must agree entry for entry: two files from
  // different exports are caught here, before a wrong weight is used.
  TANDEM_CHECK(params.entries.size() == file.params.size(), "graph file '", json_path, "' lists ",
               file.params.size(), " params but '", params_path.string(), "' holds ",
               params.entries.size(), "; the two files are not from the same export");
  for (size_t i = 0; i < file.params.size(); ++i) {
    const serialization::ParamsEntry& want = file.params[i];
    const serialization::ParamsEntry& have = params.entries[i];
    TANDEM_CHECK(want == have, "graph file '", json_path, "' and params file '",
                 params_path.string(), "' disagree on tensor ", i, " ('", want.name, "' ",
                 dtype_name(want.dtype), want.shape.to_string(), " at offset ", want.offset,
                 ", crc32 ", want.crc32, " vs '", have.name, "' ", dtype_name(have.dtype),
                 have.shape.to_string(), " at offset ", have.offset, ", crc32 ", have.crc32,
                 "); the two files are not from the same export");
  }
  absl::flat_hash_map<std::string, Tensor> by_name;
  for (serialization::NamedTensor& t : params.tensors) by_name[t.name] = std::move(t.tensor);

  const trace::Graph& graph = file.graph;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const trace::GraphInput& input = graph.inputs[i];
    const trace::Value& v = graph.value(input.value);
    if (input.kind != trace::InputKind::kData) {
      impl->params.push_back(by_name.at(input.name));
      continue;
    }
    const bool dynamic = !file.inputs[i].dynamic_dims.empty();
    impl->inputs.push_back({input.name, v.dtype, v.shape, dynamic});
    if (dynamic) impl->traced_batch = v.shape[0];
  }
  // Which outputs follow the batch: those whose size changes with it.
  std::optional<trace::Graph> other_batch;
  if (impl->traced_batch >= 0) {
    other_batch = serialization::with_input_shapes(
        graph, serialization::data_shapes_with_batch(graph, impl->traced_batch + 1),
        file.node_sources);
  }
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    const trace::Value& v = graph.value(graph.outputs[o].value);
    const bool dynamic = other_batch && v.shape.rank() > 0 &&
                         other_batch->value(other_batch->outputs[o].value).shape[0] != v.shape[0];
    impl->outputs.push_back({graph.outputs[o].name, v.dtype, v.shape, dynamic});
  }
  // Plan the traced batch size now, so that what the passes or the planner
  // refuse is reported by load(), not by the first run().
  impl->executor_for(impl->traced_batch);
  LoadedModel model;
  model.impl_ = std::move(impl);
  return model;
}

}  // namespace tandem
