#include "eager/export_check.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <random>
#include <utility>

#include "core/error.h"
#include "eager/ops.h"
#include "kernels/dispatch.h"
#include "kernels/known_ops.h"
#include "serialization/model.h"
#include "serialization/params.h"
#include "trace/executor.h"
#include "trace/passes/pipeline.h"
#include "trace/subgraph.h"

namespace tandem {
namespace {

// Outputs agree when every element is within this share of the output's
// largest magnitude (plus a floor): passes may round differently (a fused
// activation, a batch norm folded into weights), a wrong fold does not come
// close.
constexpr double kRelative = 1e-3;
constexpr double kAbsolute = 1e-5;

std::vector<double> values_of(const Tensor& t) {
  return kernels::call1(kernels::cast_op(), {t}, {{"dtype", DType::kFloat64}},
                        std::source_location::current())
      .to_vector<double>();
}

// Where `got` and `want` part, or nullopt when they agree; `got_is` and
// `want_is` name them in the answer.
std::optional<std::string> difference(const Tensor& got, const Tensor& want,
                                      const char* got_is = "loaded",
                                      const char* want_is = "eager") {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return str_cat(dtype_name(got.dtype()), got.shape().to_string(), " vs ",
                   dtype_name(want.dtype()), want.shape().to_string());
  }
  const std::vector<double> a = values_of(got), b = values_of(want);
  double scale = 0;
  for (double v : b) scale = std::isfinite(v) ? std::max(scale, std::abs(v)) : scale;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (!(std::abs(a[i] - b[i]) <= kAbsolute + kRelative * scale)) {
      return str_cat("element ", i, " is ", a[i], " ", got_is, " vs ", b[i], " ", want_is);
    }
  }
  return std::nullopt;
}

// "node 3 (batch_norm, traced at model.cc:12)": the source the file records.
std::string node_text(const serialization::GraphFile& file, int n) {
  const size_t k = static_cast<size_t>(n);
  const std::string& source = k < file.node_sources.size() ? file.node_sources[k] : std::string();
  return str_cat("node ", n, " (", file.graph.nodes[k].op->name,
                 source.empty() ? std::string() : str_cat(", traced at ", source), ")");
}

// The graph computing `value` of `graph`, with the same inputs.
trace::Graph probe(const trace::Graph& graph, trace::ValueId value) {
  return trace::extract_subgraph(graph, trace::nodes_needed_for(graph, {value}), graph.inputs,
                                 {{value, "probe"}});
}

// `graph` as tandem::load runs it: parameters as constants, optimized for
// inference.
trace::Graph as_loaded(trace::Graph graph, const std::vector<Tensor>& params) {
  size_t next = 0;
  for (trace::GraphInput& input : graph.inputs) {
    if (input.kind == trace::InputKind::kData) continue;
    input.kind = trace::InputKind::kConstant;
    input.constant = params[next++];
  }
  trace::optimize(graph, {.inference = true, .name = "export_check"});
  return graph;
}

// Where the loaded model parts from the eager one, for output `output`
// (see the header).
std::string locate(const serialization::GraphFile& file, const std::string& written,
                   const std::vector<Tensor>& example, size_t output) {
  const trace::Graph& graph = file.graph;
  const serialization::ParamsFile params = serialization::read_params(
      (std::filesystem::path(written).parent_path() / file.params_file).string());
  std::vector<Tensor> param_tensors, inputs = example;
  for (const serialization::NamedTensor& t : params.tensors) {
    param_tensors.push_back(t.tensor);
    inputs.push_back(t.tensor);
  }
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    for (trace::ValueId value : graph.nodes[static_cast<size_t>(n)].outputs) {
      trace::Graph as_written = probe(graph, value);
      const Tensor want = trace::Executor(as_written).run(inputs)[0];
      const Tensor got = trace::Executor(as_loaded(std::move(as_written), param_tensors))
                             .run(absl::MakeConstSpan(example))[0];
      if (auto d = difference(got, want, "optimized again", "as exported")) {
        return str_cat("they part at ", node_text(file, n),
                       " once the loader optimizes the graph: its ", *d,
                       "; an optimization pass is wrong on this already optimized graph, a "
                       "Tandem bug: please report it");
      }
    }
  }
  const trace::Value& v = graph.value(graph.outputs[output].value);
  return v.node < 0 ? std::string("the output is a graph input as exported")
                    : str_cat(
                          "the exported graph itself differs (the function may read host "
                          "state that a trace freezes, eager/hybridize.h); the output is "
                          "made by ",
                          node_text(file, v.node));
}

// One example per data input (see the header), of `shapes` (one per data
// input) or else the graph's own.
std::vector<Tensor> example_inputs(const trace::Graph& graph, absl::Span<const Shape> shapes = {}) {
  std::vector<Tensor> examples;
  int64_t seed = 0x5eed;
  for (const trace::GraphInput& input : graph.inputs) {
    if (input.kind != trace::InputKind::kData) continue;
    const trace::Value& v = graph.value(input.value);
    const Shape& shape = shapes.empty() ? v.shape : shapes[examples.size()];
    const std::vector<int64_t> dims(shape.begin(), shape.end());
    if (is_floating_point(v.dtype)) {
      examples.push_back(kernels::call1(kernels::randn_op(), {},
                                        {{"shape", dims}, {"dtype", v.dtype}, {"seed", seed++}},
                                        std::source_location::current()));
    } else {
      examples.push_back(zeros(dims, v.dtype));
    }
  }
  return examples;
}

// A folder of its own in the system's temporary folder, removed with it.
class ScratchFolder {
 public:
  ScratchFolder() {
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            str_cat("tandem-export-check-", ::getpid(), "-", random());
    std::filesystem::create_directories(path_);
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// `at_traced`: the example has the traced shapes, where the exported graph's
// nodes can be compared one by one to find where the two part.
void check_exported_model(
    const std::string& written, const std::vector<Tensor>& example,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& eager,
    const std::string& what, bool at_traced,
    const std::function<LoadedModel(const std::string&)>& read) {
  LoadedModel loaded = read ? read(written) : load(written);
  std::vector<Tensor> got;
  try {
    got = loaded.run(example);
  } catch (const Error& e) {
    throw Error(str_cat(what,
                        ": the exported model, loaded as a deployment loads it, fails on "
                        "inputs of shape ",
                        example.empty() ? std::string("[]") : example[0].shape().to_string(), ": ",
                        e.message(), ". Nothing was written"));
  }
  const std::vector<Tensor> want = eager(example);
  TANDEM_CHECK(got.size() == want.size(), what, ": the loaded model returns ", got.size(),
               " outputs, the eager function ", want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    std::optional<std::string> d = difference(got[o], want[o]);
    if (!d) continue;
    TANDEM_CHECK(false, what, ": the exported model, loaded as a deployment loads it, gives ",
                 "another answer than the eager model: output ", o, " ", loaded.outputs()[o].name,
                 " at input shape ",
                 example.empty() ? std::string("[]") : example[0].shape().to_string(), ": ", *d,
                 "; ",
                 read        ? std::string("the file, read back, computes something else (a Tandem "
                                                  "bug: please report it)")
                 : at_traced ? locate(loaded.file(), written, example, o)
                             : std::string("the traced shapes agree, so the graph does not follow "
                                           "its free dimensions there (a Tandem bug: please report "
                                           "it)"),
                 ". Nothing was written (ExportOptions{.check = false} skips the check)");
  }
}

}  // namespace

void check_export(const std::function<void(const std::string& path)>& write,
                  const trace::Graph& graph,
                  const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& eager,
                  const std::string& what, absl::Span<const std::vector<Shape>> other_shapes,
                  const std::function<LoadedModel(const std::string&)>& read) {
  ScratchFolder scratch;
  const std::string trial = scratch.file("model");
  write(trial);
  check_exported_model(trial, example_inputs(graph), eager, what, /*at_traced=*/true, read);
  for (const std::vector<Shape>& shapes : other_shapes) {
    check_exported_model(trial, example_inputs(graph, shapes), eager, what, /*at_traced=*/false,
                         read);
  }
}

}  // namespace tandem
