#include "serialization/model.h"

#include <algorithm>
#include <filesystem>
#include <list>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

#include "core/error.h"
#include "serialization/file_io.h"
#include "serialization/file_name.h"
#include "serialization/onnx_export.h"
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

// Note [Exporting two files]
// An export writes two files, and a process killed at any instant must
// leave a model that loads: the old one or the new one, never neither. So a
// params file is never replaced in place. It is named after its contents,
// "<stem>.<its header checksum, 8 hex digits>.params" beside "<stem>.json",
// and an export
//   1. writes both files to temporary files in the folder (AtomicFile, Note
//      [Atomic writes]: nothing of them has a name yet);
//   2. renames the params file into place under its new name: the old graph
//      file still names the old params file, which is untouched;
//   3. renames the graph file over the old one: from this instant the new
//      pair is the model;
//   4. removes the params files the new one supersedes: the one the old
//      graph file named, and any other "<stem>.<8 hex digits>.params" (left
//      by an export killed between 2 and 3).
// Each rename is durable before the next step (the folder is fsynced). The
// same model gives the same name and the same bytes (LoadedModel::
// export_model, the golden files); renaming a file over one with the same
// bytes changes nothing for a reader. Step 4 removes only names an export to
// this path owns: "<stem>.<8 hex digits>.params", unless a graph file
// "<stem>.<8 hex digits>.json" says that it belongs to another model, and
// "<stem>.params" (the name earlier versions gave), only when the old graph
// file named it. A loader that read the old graph file just before step 3
// and opens its params file after step 4 fails with "cannot open"; loading
// again gives the new model. Two exports to one path at once are not
// supported.

std::string exported_params_name(const std::string& stem, uint32_t checksum) {
  return checked_file_name(stem, str_cat(".", absl::Hex(checksum, absl::kZeroPad8), ".params"),
                           "export name");
}

// Whether `name` is "<stem>.<8 hex digits>.params".
bool is_exported_params_name(std::string_view name, std::string_view stem) {
  constexpr std::string_view kExtension = ".params";
  constexpr size_t kDigits = 8;
  if (name.size() != stem.size() + 1 + kDigits + kExtension.size() ||
      name.substr(0, stem.size()) != stem || name[stem.size()] != '.' ||
      name.substr(name.size() - kExtension.size()) != kExtension) {
    return false;
  }
  const std::string_view digits = name.substr(stem.size() + 1, kDigits);
  return std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

// Step 4 of Note [Exporting two files].
void remove_superseded_params(const fs::path& folder, const std::string& stem,
                              const std::string& current, const std::optional<std::string>& old) {
  std::error_code error;
  const fs::path where = folder.empty() ? fs::path(".") : folder;
  if (old && *old != current && *old == stem + ".params") fs::remove(where / *old, error);
  for (const fs::directory_entry& entry : fs::directory_iterator(where, error)) {
    const std::string name = entry.path().filename().string();
    if (name == current || !is_exported_params_name(name, stem)) continue;
    const std::string other_model = name.substr(0, name.size() - 7) + ".json";
    if (fs::exists(where / other_model, error)) continue;
    fs::remove(entry.path(), error);
  }
}

// Writes the params (in the order of the graph's non-data inputs) and
// `file`, now naming them, as `path`.json and its params file (Note
// [Exporting two files]).
void write_model_files(const std::string& path, GraphFile& file,
                       absl::Span<const NamedTensor> params) {
  const fs::path base(path);
  const fs::path folder = base.parent_path();
  const std::string stem = base.filename().string();
  const ParamsImage image(params, path);
  const std::string params_name = exported_params_name(stem, image.checksum());
  const std::string json_path = path + ".json";
  std::optional<std::string> old_params;
  try {
    old_params = params_file_named_by(read_file(json_path, kMaxGraphFileBytes));
  } catch (const Error&) {
    // No graph file there yet (or none that can be read): nothing to supersede.
  }
  file.params = image.entries();
  file.params_file = params_name;
  const std::string text = write_graph_json(file);

  const std::string params_path = (folder / params_name).string();
  // A new params file takes the permissions of the one it supersedes.
  AtomicFile params_out(params_path,
                        {.like = old_params ? (folder / *old_params).string() : json_path});
  image.write_to(params_out);
  AtomicFile json_out(json_path);
  json_out.write(text);
  params_out.commit();
  try {
    json_out.commit();
  } catch (const Error&) {
    // The old graph file is in place: the new params file is a stray.
    if (old_params != params_name) {
      std::error_code ignored;
      fs::remove(params_path, ignored);
    }
    throw;
  }
  remove_superseded_params(folder, stem, params_name, old_params);
}

}  // namespace

GraphFile graph_file_of(const trace::Graph& traced, absl::Span<const StateInput> state,
                        const trace::SymbolicShapes& symbolic, std::vector<NamedTensor>& params,
                        std::string_view what, std::vector<std::string> node_sources) {
  // Inputs in the file's order: data, then state, then constants (as params).
  trace::Graph graph = traced;
  GraphFile file;
  std::vector<trace::GraphInput> inputs;
  size_t next_state = 0;
  for (const trace::GraphInput& input : traced.inputs) {
    if (input.kind != trace::InputKind::kData) continue;
    inputs.push_back(input);
    file.inputs.push_back({InputRole::kData});
  }
  for (const trace::GraphInput& input : traced.inputs) {
    if (input.kind != trace::InputKind::kState) continue;
    TANDEM_INTERNAL_ASSERT(next_state < state.size(), "export: fewer state tensors than inputs");
    const StateInput& s = state[next_state++];
    inputs.push_back({input.value, s.name, trace::InputKind::kState, Tensor()});
    file.inputs.push_back({s.role});
    params.push_back({s.name, s.tensor});
  }
  TANDEM_INTERNAL_ASSERT(next_state == state.size(), "export: more state tensors than inputs");
  int next_constant = 0;
  for (const trace::GraphInput& input : traced.inputs) {
    if (input.kind != trace::InputKind::kConstant) continue;
    std::string name = str_cat("constant", next_constant++);
    inputs.push_back({input.value, name, trace::InputKind::kState, Tensor()});
    file.inputs.push_back({InputRole::kConstant});
    params.push_back({name, input.constant});
  }
  absl::flat_hash_set<std::string> names;
  for (const trace::GraphInput& input : inputs) {
    TANDEM_CHECK(names.insert(input.name).second, what, ": two graph inputs are called '",
                 input.name, "'");
  }
  graph.inputs = std::move(inputs);
  file.node_sources = node_sources.empty() ? sources_of(graph) : std::move(node_sources);
  TANDEM_INTERNAL_ASSERT(file.node_sources.size() == graph.nodes.size(),
                         "export: one source per node");
  file.symbolic = symbolic;
  file.graph = std::move(graph);
  file.producer = TANDEM_PRODUCER;
  return file;
}

void export_graph(const std::string& path, const trace::Graph& traced,
                  absl::Span<const StateInput> state, const trace::SymbolicShapes& symbolic) {
  std::vector<NamedTensor> params;
  GraphFile file = graph_file_of(traced, state, symbolic, params, str_cat("export '", path, "'"));
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
  trace::SymbolValues traced_sizes;  // The free dimensions' sizes in file.graph.

  // Executors by the free dimensions' sizes, most recently used first.
  static constexpr size_t kCachedSizes = 4;
  mutable std::mutex mutex;
  mutable std::list<std::pair<trace::SymbolValues, std::shared_ptr<const trace::Executor>>>
      executors;

  std::shared_ptr<const trace::Executor> build(const trace::SymbolValues& sizes) const;
  std::shared_ptr<const trace::Executor> executor_for(const trace::SymbolValues& sizes) const;
};

std::shared_ptr<const trace::Executor> LoadedModel::Impl::build(
    const trace::SymbolValues& sizes) const {
  trace::Graph graph = sizes == traced_sizes ? file.graph
                                             : trace::instantiate(file.graph, file.symbolic, sizes,
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

std::shared_ptr<const trace::Executor> LoadedModel::Impl::executor_for(
    const trace::SymbolValues& sizes) const {
  std::lock_guard lock(mutex);
  for (auto it = executors.begin(); it != executors.end(); ++it) {
    if (it->first == sizes) {
      executors.splice(executors.begin(), executors, it);
      return it->second;
    }
  }
  executors.emplace_front(sizes, build(sizes));
  if (executors.size() > kCachedSizes) executors.pop_back();
  return executors.front().second;
}

bool LoadedModel::TensorSpec::is_dynamic() const {
  return std::any_of(free_dims.begin(), free_dims.end(),
                     [](const std::string& d) { return !d.empty(); });
}

std::string LoadedModel::TensorSpec::shape_text() const {
  std::string text = "[";
  for (int a = 0; a < shape.rank(); ++a) {
    const std::string& free = free_dims[static_cast<size_t>(a)];
    text += str_cat(a ? ", " : "", free.empty() ? std::to_string(shape[a]) : free);
  }
  return text + "]";
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
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = m.inputs[i];
    const Tensor& x = inputs[i];
    TANDEM_CHECK(x.defined(), "model input '", spec.name, "' is an undefined tensor");
    TANDEM_CHECK(x.dtype() == spec.dtype, "model input '", spec.name, "' must be ",
                 dtype_name(spec.dtype), ", got ", dtype_name(x.dtype()));
    TANDEM_CHECK(x.device() == Device::cpu(), "model input '", spec.name,
                 "' must be on the CPU, got ", x.device().to_string());
    bool fits = x.rank() == spec.shape.rank();
    for (int d = 0; fits && d < x.rank(); ++d) {
      fits = !spec.free_dims[static_cast<size_t>(d)].empty() || x.shape()[d] == spec.shape[d];
    }
    TANDEM_CHECK(fits, "model input '", spec.name, "' must have shape ", spec.shape_text(),
                 ", got ", x.shape().to_string());
    shapes.push_back(x.shape());
  }
  trace::SymbolValues sizes;
  try {
    sizes = trace::bind_symbols(m.file.graph, m.file.symbolic, shapes);
  } catch (const Error& e) {
    throw Error(str_cat("model '", m.name, "': ", e.message()));
  }
  return m.executor_for(sizes)->run(inputs, {}, where);
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

void LoadedModel::export_onnx(const std::string& path) const {
  const GraphFile& file = impl_->file;
  std::vector<serialization::StateInput> state;
  size_t next = 0;
  for (size_t i = 0; i < file.graph.inputs.size(); ++i) {
    const trace::GraphInput& input = file.graph.inputs[i];
    if (input.kind == trace::InputKind::kData) continue;
    state.push_back({input.name, impl_->params[next++], file.inputs[i].role});
  }
  serialization::export_onnx(path, file.graph, state, file.symbolic, file.node_sources);
}

LoadedModel load(const std::string& path) {
  namespace fs = std::filesystem;
  std::string json_path = path;
  std::error_code ignored;
  if (!fs::exists(json_path, ignored) && fs::exists(json_path + ".json", ignored)) {
    json_path += ".json";
  }
  serialization::GraphFile file = serialization::parse_graph_json(
      serialization::read_file(json_path, serialization::kMaxGraphFileBytes), json_path);
  // The params file must be a regular file beside the graph file (the graph
  // parser already refused names with a folder in them), not a link.
  const fs::path params_path = fs::path(json_path).parent_path() / file.params_file;
  serialization::ParamsFile params = serialization::read_params(params_path.string(), true);
  return load(std::move(file), std::move(params), json_path);
}

LoadedModel load_graph(const trace::Graph& graph, absl::Span<const serialization::StateInput> state,
                       const trace::SymbolicShapes& symbolic, std::vector<std::string> node_sources,
                       std::string_view name) {
  std::vector<serialization::NamedTensor> tensors;
  GraphFile file =
      serialization::graph_file_of(graph, state, symbolic, tensors, name, std::move(node_sources));
  const serialization::ParamsImage image(tensors, name);
  file.params = image.entries();
  file.params_file = str_cat(std::filesystem::path(name).filename().string(), ".params");
  return load(std::move(file), {image.entries(), std::move(tensors)}, name);
}

LoadedModel load(serialization::GraphFile graph_file, serialization::ParamsFile params,
                 std::string_view name) {
  const std::string json_path(name);
  const std::string params_path =
      (std::filesystem::path(json_path).parent_path() / graph_file.params_file).string();
  auto impl = std::make_shared<LoadedModel::Impl>();
  impl->name = json_path;
  // The manifest and the file must agree entry for entry: two files from
  // different exports are caught here, before a wrong weight is used.
  TANDEM_CHECK(params.entries.size() == graph_file.params.size(), "graph file '", json_path,
               "' lists ", graph_file.params.size(), " params but '", params_path, "' holds ",
               params.entries.size(), "; the two files are not from the same export");
  for (size_t i = 0; i < graph_file.params.size(); ++i) {
    const serialization::ParamsEntry& want = graph_file.params[i];
    const serialization::ParamsEntry& have = params.entries[i];
    TANDEM_CHECK(want == have, "graph file '", json_path, "' and params file '", params_path,
                 "' disagree on tensor ", i, " ('", want.name, "' ", dtype_name(want.dtype),
                 want.shape.to_string(), " at offset ", want.offset, ", crc32 ", want.crc32,
                 " vs '", have.name, "' ", dtype_name(have.dtype), have.shape.to_string(),
                 " at offset ", have.offset, ", crc32 ", have.crc32,
                 "); the two files are not from the same export");
  }
  // read_params gives each entry its tensor; a ParamsFile made otherwise must too.
  TANDEM_CHECK(params.tensors.size() == params.entries.size(), "params of '", json_path,
               "': ", params.entries.size(), " entries but ", params.tensors.size(), " tensors");
  for (size_t i = 0; i < params.tensors.size(); ++i) {
    const Tensor& t = params.tensors[i].tensor;
    const serialization::ParamsEntry& entry = params.entries[i];
    TANDEM_CHECK(params.tensors[i].name == entry.name && t.defined() && t.device().is_cpu() &&
                     t.dtype() == entry.dtype && t.shape() == entry.shape,
                 "params of '", json_path, "': tensor ", i, " ('", params.tensors[i].name,
                 "') is not the CPU tensor its entry describes ('", entry.name, "' ",
                 dtype_name(entry.dtype), entry.shape.to_string(), ")");
  }
  impl->file = std::move(graph_file);
  const GraphFile& file = impl->file;
  absl::flat_hash_map<std::string, Tensor> by_name;
  for (serialization::NamedTensor& t : params.tensors) by_name[t.name] = std::move(t.tensor);

  const trace::Graph& graph = file.graph;
  auto spec_of = [&](std::string name, trace::ValueId value) {
    const trace::Value& v = graph.value(value);
    LoadedModel::TensorSpec spec{std::move(name), v.dtype, v.shape, {}};
    for (int a = 0; a < v.shape.rank(); ++a) {
      const trace::SizeExpr* size = file.symbolic.dim(value, a);
      spec.free_dims.push_back(size ? size->to_string() : std::string());
    }
    return spec;
  };
  std::vector<Shape> traced_shapes;
  for (const trace::GraphInput& input : graph.inputs) {
    if (input.kind != trace::InputKind::kData) {
      impl->params.push_back(by_name.at(input.name));
      continue;
    }
    impl->inputs.push_back(spec_of(input.name, input.value));
    traced_shapes.push_back(graph.value(input.value).shape);
  }
  impl->traced_sizes = trace::bind_symbols(graph, file.symbolic, traced_shapes);
  for (const trace::GraphOutput& output : graph.outputs) {
    impl->outputs.push_back(spec_of(output.name, output.value));
  }
  // Plan the traced sizes now, so that what the passes or the planner
  // refuse is reported by load(), not by the first run().
  impl->executor_for(impl->traced_sizes);
  LoadedModel model;
  model.impl_ = std::move(impl);
  return model;
}

}  // namespace tandem
