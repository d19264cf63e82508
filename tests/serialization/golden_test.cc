// Golden files: models exported by an earlier Tandem (tests/data/golden),
// which every later version must still load and run to the same outputs.
// The format may only grow in ways these files survive (a new minor
// version); changing them means a new major version.
//
// To add files for a new format version (never to overwrite old ones):
//   TANDEM_WRITE_GOLDEN=1 build/release/tests/serialization_tests --gtest_filter='Golden*'
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "serialization/file_io.h"
#include "serialization/graph_file.h"
#include "serialization/model.h"
#include "serialization/npy.h"
#include "tandem/tandem.h"
#include "tests/serialization/test_util.h"
#include "trace/executor.h"
#include "trace/passes/pipeline.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

const fs::path kGoldenDir = fs::path(TANDEM_TEST_DATA_DIR) / "golden";

struct Golden {
  std::string name;  // Files: <name>.json, .params, _input.npy, _output.npy.
  std::shared_ptr<nn::Module> (*make)();
  std::vector<int64_t> input_shape;
  FreeDims free = {};  // Exported with these free (else the batch).
  // Another input shape the free dimensions allow (empty: none).
  std::vector<int64_t> other_shape = {};
};

std::shared_ptr<nn::Module> small_cnn() {
  return std::make_shared<nn::Sequential>(nn::Conv2d(1, 4, 3, 1, 1), nn::BatchNorm2d(4), nn::ReLU(),
                                          nn::MaxPool2d(2), nn::Flatten(),
                                          nn::Linear(4 * 4 * 4, 10));
}

std::shared_ptr<nn::Module> small_mlp() {
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(16, 8), nn::GELU(),
                                          nn::Linear(8, 3));
}

// A two-layer GRU, then an LSTM: recurrences as one op each, the sequence
// free (one direction, so that a prefix gives the rows it gives at the
// traced length).
std::shared_ptr<nn::Module> small_recurrent() {
  return std::make_shared<nn::Sequential>(
      nn::GRU({.input_size = 4, .hidden_size = 3, .num_layers = 2}),
      nn::LSTM({.input_size = 3, .hidden_size = 4}));
}

// Positions over a causal encoder layer: a graph with sizes written as
// expressions of batch and seq, and a limit (seq <= 6).
std::shared_ptr<nn::Module> small_encoder() {
  return std::make_shared<nn::Sequential>(
      nn::PositionalEncoding({.d_model = 8, .max_len = 6, .dropout = 0.0}),
      nn::TransformerEncoderLayer(
          {.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0, .causal = true}));
}

// Two strided 1-d convolutions over a free length: sizes that are floor
// divisions of it.
std::shared_ptr<nn::Module> small_strided() {
  return std::make_shared<nn::Sequential>(nn::Conv1d(2, 4, 3, 2, 1), nn::ReLU(),
                                          nn::Conv1d(4, 3, 3, 3));
}

void PrintTo(const Golden& golden, std::ostream* out) { *out << golden.name; }

const std::vector<Golden>& goldens() {
  static const std::vector<Golden> all = {
      {"cnn_v1_0", small_cnn, {2, 1, 8, 8}},
      {"mlp_v1_0", small_mlp, {2, 1, 4, 4}},
      // 1.1: nodes carry their module path ("scope").
      {"cnn_v1_1", small_cnn, {2, 1, 8, 8}},
      {"mlp_v1_1", small_mlp, {2, 1, 4, 4}},
      // 1.2: free dimensions (inputs' and values' "dims", attributes'
      // "size", "limits"); "dynamic_dims" is no longer written.
      {"cnn_v1_2", small_cnn, {2, 1, 8, 8}},
      {"mlp_v1_2", small_mlp, {2, 1, 4, 4}},
      {"encoder_v1_2",
       small_encoder,
       {2, 5, 8},
       {{"input0", {{0, "batch"}, {1, "seq"}}}},
       {1, 3, 8}},
      // 1.3: max_pool2d's dilation; the recurrent ops.
      {"cnn_v1_3", small_cnn, {2, 1, 8, 8}},
      {"mlp_v1_3", small_mlp, {2, 1, 4, 4}},
      {"encoder_v1_3",
       small_encoder,
       {2, 5, 8},
       {{"input0", {{0, "batch"}, {1, "seq"}}}},
       {1, 3, 8}},
      {"recurrent_v1_3",
       small_recurrent,
       {2, 5, 4},
       {{"input0", {{0, "batch"}, {1, "seq"}}}},
       {1, 3, 4}},
      // 1.4: floor divisions in size expressions.
      {"cnn_v1_4", small_cnn, {2, 1, 8, 8}},
      {"strided_v1_4", small_strided, {2, 2, 12}, {{"input0", {{0, "batch"}, {2, "len"}}}}},
  };
  return all;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class GoldenFile : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenFile, LoadsAndRunsToTheRecordedOutputs) {
  const Golden& g = GetParam();
  const fs::path base = kGoldenDir / g.name;
  if (std::getenv("TANDEM_WRITE_GOLDEN") != nullptr) {
    manual_seed(2024);
    std::shared_ptr<nn::Module> model = g.make();
    // Running statistics away from their initial values, so that folding
    // them is tested.
    for (int step = 0; step < 3; ++step) model->forward(randn(g.input_shape));
    model->eval();
    model->hybridize();
    Tensor x = randn(g.input_shape);
    NoGradGuard no_grad;
    Tensor y = (*model)(x);
    model->export_model(base.string(), {.dynamic_dims = g.free});
    serialization::write_npy(base.string() + "_input.npy", x);
    serialization::write_npy(base.string() + "_output.npy", y);
  }
  LoadedModel model = load(base.string() + ".json");
  Tensor x = serialization::read_npy(base.string() + "_input.npy");
  std::vector<float> expected =
      serialization::read_npy(base.string() + "_output.npy").to_vector<float>();
  std::vector<float> actual = model.run({x})[0].to_vector<float>();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-5) << i;
  if (!g.other_shape.empty()) {
    // Other sizes of the free dimensions run, and give each row what the
    // traced sizes give it where they overlap: a causal layer's first
    // positions do not see the later ones.
    Tensor other = model.run({slice(slice(x, 0, 0, g.other_shape[0]), 1, 0, g.other_shape[1])})[0];
    EXPECT_EQ(other.shape(), Shape(absl::MakeConstSpan(g.other_shape)));
    std::vector<float> got = other.to_vector<float>();
    const int64_t seq = g.input_shape[1], width = g.input_shape[2];
    for (int64_t b = 0; b < g.other_shape[0] && b < g.input_shape[0]; ++b) {
      for (int64_t i = 0; i < g.other_shape[1] * width; ++i) {
        EXPECT_NEAR(got[static_cast<size_t>(b * g.other_shape[1] * width + i)],
                    expected[static_cast<size_t>(b * seq * width + i)], 1e-5);
      }
    }
  }

  // Written again by this build, a file of this build's version is the same
  // bytes: the writer still produces this version's format. The params
  // file's name differs (exports name it after its contents since,
  // serialization/model.cc). A file of an older version is written in this
  // build's format, which loads to the same answers and writes again as the
  // same bytes.
  ScratchDir dir;
  model.export_model(dir.file(g.name));
  const std::string params = testing::params_path_of(dir.file(g.name + ".json"));
  const std::string params_name = fs::path(params).filename().string();
  EXPECT_THAT(params_name, ::testing::MatchesRegex(g.name + "\\.[0-9a-f]{8}\\.params"));
  EXPECT_EQ(read_bytes(params), read_bytes(base.string() + ".params"));
  const std::string version = g.name.substr(g.name.size() - 3);  // "1_0"
  const std::string current =
      str_cat(serialization::kGraphFormatMajor, "_", serialization::kGraphFormatMinor);
  if (version == current) {
    EXPECT_EQ(testing::replace_first(read_bytes(dir.file(g.name + ".json")),
                                     "\"" + params_name + "\"", "\"" + g.name + ".params\""),
              read_bytes(base.string() + ".json"));
    return;
  }
  LoadedModel rewritten = load(dir.file(g.name + ".json"));
  EXPECT_EQ(rewritten.run({x})[0].to_vector<float>(), actual);
  rewritten.export_model(dir.file("again"));
  const std::string again_params =
      fs::path(testing::params_path_of(dir.file("again.json"))).filename().string();
  EXPECT_TRUE(testing::replace_first(read_bytes(dir.file("again.json")), again_params, "P") ==
              testing::replace_first(read_bytes(dir.file(g.name + ".json")), params_name, "P"));
}

// Verifies the passes' contract on already optimized graphs: a golden graph
// (optimized when it was exported) optimized for inference as a loader does,
// and then once more, gives the recorded outputs both times, and the second
// run changes nothing.
TEST_P(GoldenFile, OptimizingTheLoadedGraphAgainChangesNothing) {
  const fs::path base = kGoldenDir / GetParam().name;
  const serialization::GraphFile file = serialization::parse_graph_json(
      serialization::read_file(base.string() + ".json", serialization::kMaxGraphFileBytes),
      base.string());
  const serialization::ParamsFile params =
      serialization::read_params((kGoldenDir / file.params_file).string());
  trace::Graph graph = file.graph;
  size_t next = 0;
  for (trace::GraphInput& input : graph.inputs) {
    if (input.kind == trace::InputKind::kData) continue;
    input.kind = trace::InputKind::kConstant;
    input.constant = params.tensors[next++].tensor;
  }
  const Tensor x = serialization::read_npy(base.string() + "_input.npy");
  const std::vector<float> expected =
      serialization::read_npy(base.string() + "_output.npy").to_vector<float>();
  std::string once;
  for (int round = 1; round <= 2; ++round) {
    SCOPED_TRACE(str_cat("optimized ", round, round == 1 ? " time" : " times"));
    trace::optimize(graph, {.inference = true});
    if (round == 1) once = trace::to_text(graph);
    std::vector<float> actual = trace::Executor(graph).run({x})[0].to_vector<float>();
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-5) << i;
  }
  EXPECT_EQ(trace::to_text(graph), once);
}

INSTANTIATE_TEST_SUITE_P(Serialization, GoldenFile, ::testing::ValuesIn(goldens()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tandem
