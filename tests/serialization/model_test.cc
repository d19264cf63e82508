// Export and load (serialization/model.h): the tutorial models give the same
// outputs eagerly, hybridized, and exported then loaded (in this process and
// in tools/tandem-run), at the traced batch size and others.
#include "serialization/model.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <tuple>
#include <utility>

#include "nlohmann/json.hpp"

#include "bench/tutorial_models.h"
#include "serialization/npy.h"
#include "tests/serialization/test_util.h"
#include "tests/serialization/writer_child/models.h"

namespace tandem {
namespace {

using testing::expect_error;
using testing::params_path_of;
using testing::replace_first;
using testing::ScratchDir;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// max |a - b| <= tol * (1 + max |b|), elementwise over float32 tensors.
void expect_close(const Tensor& actual, const Tensor& expected, double tol = 1e-5) {
  ASSERT_EQ(actual.shape(), expected.shape());
  std::vector<float> a = actual.to_vector<float>(), b = expected.to_vector<float>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  EXPECT_LE(worst, tol * (1 + scale)) << "largest difference " << worst;
}

// A few Adam steps on random data, so that weights and batch-norm running
// statistics are no longer at their initial values.
void train_a_little(nn::Module& model) {
  optim::Adam optimizer(model.parameters(), {.lr = 1e-2});
  model.train();
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({8, 1, 28, 28});
    Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, Shape{8});
    optimizer.zero_grad();
    cross_entropy(model.forward(x), y).backward();
    optimizer.step();
  }
  model.eval();
}

Tensor eager_forward(nn::Module& model, const Tensor& x) {
  NoGradGuard no_grad;
  return model.forward(x);
}

// Hybridizes `model` and calls it once on `x`: what export_model needs.
Tensor hybridized_call(nn::Module& model, const Tensor& x) {
  model.hybridize();
  NoGradGuard no_grad;
  return model(x);
}

class TutorialModel : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<nn::Module> make() const {
    manual_seed(7);
    return GetParam() == "cnn" ? bench::make_tutorial_cnn() : bench::make_tutorial_mlp();
  }
};

TEST_P(TutorialModel, EagerHybridizedAndLoadedAgree) {
  std::shared_ptr<nn::Module> model = make();
  train_a_little(*model);
  Tensor x = randn({5, 1, 28, 28});
  Tensor eager = eager_forward(*model, x);

  Tensor hybridized = hybridized_call(*model, x);
  expect_close(hybridized, eager);

  ScratchDir dir;
  model->export_model(dir.file("model"));
  LoadedModel loaded = load(dir.file("model"));
  expect_close(loaded.run({x})[0], eager);
  // Other batch sizes re-plan the graph.
  for (int64_t batch : {1, 3, 16}) {
    Tensor other = randn({batch, 1, 28, 28});
    expect_close(loaded.run({other})[0], eager_forward(*model, other));
  }
  expect_close(loaded.run({x})[0], eager);
}

TEST_P(TutorialModel, ExportLoadExportGivesTheSameBytes) {
  std::shared_ptr<nn::Module> model = make();
  train_a_little(*model);
  hybridized_call(*model, randn({4, 1, 28, 28}));
  ScratchDir dir;
  model->export_model(dir.file("a"));
  load(dir.file("a.json")).export_model(dir.file("b"));
  const std::string a_params = params_path_of(dir.file("a.json"));
  const std::string b_params = params_path_of(dir.file("b.json"));
  // The only difference allowed: the params file's name, "<stem>.<checksum>.params".
  const std::string a_name = std::filesystem::path(a_params).filename().string();
  EXPECT_EQ(std::filesystem::path(b_params).filename().string(), "b" + a_name.substr(1));
  EXPECT_EQ(read_bytes(dir.file("a.json")),
            replace_first(read_bytes(dir.file("b.json")), "\"b" + a_name.substr(1), "\"" + a_name));
  EXPECT_EQ(read_bytes(a_params), read_bytes(b_params));
}

// The exported model runs in another process that links no model code.
TEST_P(TutorialModel, TandemRunGivesTheSameOutputs) {
  std::shared_ptr<nn::Module> model = make();
  train_a_little(*model);
  Tensor x = randn({6, 1, 28, 28});
  Tensor eager = eager_forward(*model, x);
  hybridized_call(*model, x);
  ScratchDir dir;
  model->export_model(dir.file("model"));
  serialization::write_npy(dir.file("x.npy"), x);
  const std::string command = std::string(TANDEM_RUN_PATH) + " " + dir.file("model.json") +
                              " --input input0=" + dir.file("x.npy") + " --output " +
                              dir.file("out") + " > " + dir.file("log.txt") + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << read_bytes(dir.file("log.txt"));
  expect_close(serialization::read_npy(dir.file("out/output0.npy")), eager);
}

// tandem-run's refusals: one line naming the problem; status 1 for a bad
// file, 2 for bad arguments.
TEST(TandemRun, ReportsBadFilesAndArguments) {
  ScratchDir dir;
  auto run = [&](const std::string& args) {
    const std::string command =
        std::string(TANDEM_RUN_PATH) + " " + args + " > " + dir.file("log.txt") + " 2>&1";
    const int status = std::system(command.c_str());
    return std::pair<int, std::string>{WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                       read_bytes(dir.file("log.txt"))};
  };
  auto [status, log] = run(dir.file("missing.json"));
  EXPECT_EQ(status, 1);
  EXPECT_THAT(log, ::testing::HasSubstr("missing.json"));
  std::tie(status, log) = run("");
  EXPECT_EQ(status, 2);
  EXPECT_THAT(log, ::testing::HasSubstr("no model given"));
  std::tie(status, log) = run("m.json --repeat lots");
  EXPECT_EQ(status, 2);
  EXPECT_THAT(log, ::testing::HasSubstr("--repeat takes a count"));

  auto model = bench::make_tutorial_mlp();
  hybridized_call(*model, randn({2, 1, 28, 28}));
  model->export_model(dir.file("mlp"));
  serialization::write_npy(dir.file("x.npy"), randn({3, 1, 28, 28}, DType::kFloat64));
  std::tie(status, log) = run(dir.file("mlp.json") + " --input input0=" + dir.file("x.npy"));
  EXPECT_EQ(status, 1);
  EXPECT_THAT(log, ::testing::HasSubstr("model input 'input0' must be float32, got float64"));
  std::tie(status, log) = run(dir.file("mlp.json") + " --input other=" + dir.file("x.npy"));
  EXPECT_EQ(status, 2);
  EXPECT_THAT(log, ::testing::HasSubstr("missing --input input0=FILE.npy"));
}

// Verifies that an output name from the model file never becomes a path:
// tandem-run refuses "../x", "/abs/x" and the like (serialization/
// file_name.h) before it runs or writes anything.
TEST(TandemRun, OutputNamesStayInTheOutputFolder) {
  ScratchDir dir;
  auto model = bench::make_tutorial_mlp();
  hybridized_call(*model, randn({2, 1, 28, 28}));
  model->export_model(dir.file("mlp"));
  serialization::write_npy(dir.file("x.npy"), randn({2, 1, 28, 28}));
  const nlohmann::json exported = nlohmann::json::parse(read_bytes(dir.file("mlp.json")));
  std::filesystem::create_directories(dir.file("out/deep"));
  for (const std::string& name : std::vector<std::string>{"../../escaped", dir.file("absolute"),
                                                          "..", "a\\b", std::string(252, 'n')}) {
    nlohmann::json edited = exported;
    edited["outputs"][0]["name"] = name;
    std::ofstream(dir.file("bad.json")) << edited.dump();
    const std::string command = std::string(TANDEM_RUN_PATH) + " " + dir.file("bad.json") +
                                " --input " + dir.file("x.npy") + " --output " +
                                dir.file("out/deep") + " > " + dir.file("log.txt") + " 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << name << ": " << status;
    const std::string log = read_bytes(dir.file("log.txt"));
    EXPECT_THAT(log, ::testing::HasSubstr("output name")) << log;
    EXPECT_THAT(log, ::testing::HasSubstr("cannot be a file name")) << log;
    EXPECT_TRUE(std::filesystem::is_empty(dir.file("out/deep"))) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("escaped")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("absolute.npy")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/escaped.npy")));
}

INSTANTIATE_TEST_SUITE_P(Serialization, TutorialModel, ::testing::Values("mlp", "cnn"));

TEST(ExportLoad, SignatureNamesInputsOutputsAndTheBatch) {
  manual_seed(1);
  auto model = bench::make_tutorial_mlp();
  model->eval();
  hybridized_call(*model, randn({2, 1, 28, 28}));
  ScratchDir dir;
  model->export_model(dir.file("mlp"));
  LoadedModel loaded = load(dir.file("mlp"));
  ASSERT_EQ(loaded.inputs().size(), 1u);
  EXPECT_EQ(loaded.inputs()[0].name, "input0");
  EXPECT_EQ(loaded.inputs()[0].shape, Shape({2, 1, 28, 28}));
  EXPECT_EQ(loaded.inputs()[0].shape_text(), "[batch, 1, 28, 28]");
  ASSERT_EQ(loaded.outputs().size(), 1u);
  EXPECT_EQ(loaded.outputs()[0].shape, Shape({2, 10}));
  EXPECT_EQ(loaded.outputs()[0].shape_text(), "[batch, 10]");
  // Parameters keep their state_dict names.
  std::vector<std::string> names;
  for (const auto& entry : loaded.file().params) names.push_back(entry.name);
  EXPECT_THAT(names, ::testing::ElementsAre("1.weight", "1.bias", "3.weight", "3.bias", "5.weight",
                                            "5.bias"));
}

TEST(ExportLoad, ExportLeavesTheModuleInItsMode) {
  auto model = bench::make_tutorial_cnn();
  model->train();
  hybridized_call(*model, randn({2, 1, 28, 28}));
  ScratchDir dir;
  model->export_model(dir.file("cnn"));
  EXPECT_TRUE(model->is_training());
  // The exported graph is the inference one: batch norm with its running
  // statistics (the loader folds it into the convolution), no dropout.
  LoadedModel loaded = load(dir.file("cnn"));
  for (const trace::Node& node : loaded.file().graph.nodes) {
    if (node.op->name == "batch_norm") {
      EXPECT_FALSE(node.attrs.get_bool("training"));
    }
    EXPECT_NE(node.op->name, "dropout");
  }
}

TEST(ExportLoad, FixedBatchRefusesOtherSizes) {
  auto model = bench::make_tutorial_mlp();
  hybridized_call(*model, randn({2, 1, 28, 28}));
  ScratchDir dir;
  model->export_model(dir.file("mlp"), {.dynamic_batch = false});
  LoadedModel loaded = load(dir.file("mlp"));
  EXPECT_FALSE(loaded.inputs()[0].is_dynamic());
  expect_error(
      [&] {
        loaded.run({randn({3, 1, 28, 28})});
      },
      {"model input 'input0' must have shape [2, 1, 28, 28], got [3, 1, 28, 28]"});
}

TEST(ExportLoad, RunChecksItsInputs) {
  auto model = bench::make_tutorial_mlp();
  hybridized_call(*model, randn({2, 1, 28, 28}));
  ScratchDir dir;
  model->export_model(dir.file("mlp"));
  LoadedModel loaded = load(dir.file("mlp"));
  expect_error([&] { loaded.run({}); }, {"takes 1 input, got 0"});
  expect_error(
      [&] {
        loaded.run({randn({2, 1, 28, 28}, DType::kFloat64)});
      },
      {"model input 'input0' must be float32, got float64"});
  expect_error(
      [&] {
        loaded.run({randn({2, 1, 28, 27})});
      },
      {"model input 'input0' must have shape [batch, 1, 28, 28], got [2, 1, 28, 27]"});
}

TEST(ExportLoad, ExportNeedsHybridizeAndOneCall) {
  auto model = bench::make_tutorial_mlp();
  ScratchDir dir;
  expect_error([&] { model->export_model(dir.file("m")); }, {"call hybridize() first"});
  model->hybridize();
  expect_error([&] { model->export_model(dir.file("m")); },
               {"call the hybridized module once first"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.json")));
}

TEST(ExportLoad, HybridFunctionNamesItsState) {
  Tensor w = randn({4, 3}).requires_grad_();
  Tensor b = randn({3});
  HybridFunction f(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{add(matmul(in[0], w), b)}; });
  Tensor x = randn({2, 4});
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = f({x})[0];
  }
  ScratchDir dir;
  f.export_model(dir.file("f"), {{"weight", w}});
  LoadedModel loaded = load(dir.file("f"));
  const auto& inputs = loaded.file().graph.inputs;
  ASSERT_EQ(inputs.size(), 3u);
  EXPECT_EQ(inputs[1].name, "weight");
  EXPECT_EQ(inputs[2].name, "state1");
  EXPECT_EQ(loaded.file().inputs[1].role, serialization::InputRole::kParameter);
  EXPECT_EQ(loaded.file().inputs[2].role, serialization::InputRole::kBuffer);
  expect_close(loaded.run({x})[0], expected);
}

TEST(ExportLoad, ATrainingStepCannotBeExported) {
  auto model = bench::make_tutorial_mlp();
  optim::Adam optimizer(model->parameters());
  HybridFunction step([&](const std::vector<Tensor>& in) {
    optimizer.zero_grad();
    Tensor loss = cross_entropy(model->forward(in[0]), in[1]);
    loss.backward();
    optimizer.step();
    return std::vector<Tensor>{loss};
  });
  step({randn({2, 1, 28, 28}), Tensor::from_vector<int64_t>({1, 2}, Shape{2})});
  ScratchDir dir;
  expect_error([&] { step.export_model(dir.file("step")); },
               {"updates state or computes gradients", "export an inference function"});
}

// Verifies Note [Exporting two files]: exporting again over a model keeps
// the graph file's permission bits (and gives them to the new params file),
// writes through a graph file that is a symbolic link, and removes the
// superseded params file and only that.
TEST(ExportLoad, ExportAgainKeepsPermissionsAndLinks) {
  ScratchDir dir;
  std::shared_ptr<nn::Module> models[2] = {testing::writer_model(0), testing::writer_model(1)};
  for (auto& model : models) testing::prepare_export(*model);
  const std::string path = dir.file("m");
  models[0]->export_model(path);
  const std::string first_params = params_path_of(path + ".json");
  ASSERT_EQ(::chmod((path + ".json").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(first_params.c_str(), 0640), 0);
  models[1]->export_model(path);
  const std::string second_params = params_path_of(path + ".json");
  EXPECT_NE(second_params, first_params);
  EXPECT_FALSE(std::filesystem::exists(first_params));
  struct stat info;
  ASSERT_EQ(::stat((path + ".json").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(second_params.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0640u);

  // The graph file a link: the link stays and load finds the params beside it.
  std::filesystem::create_directory(dir.file("real"));
  std::filesystem::rename(path + ".json", dir.file("real/m.json"));
  std::filesystem::create_symlink("real/m.json", path + ".json");
  models[0]->export_model(path);
  EXPECT_TRUE(std::filesystem::is_symlink(path + ".json"));
  const Tensor x = testing::writer_model_input();
  std::vector<float> want;
  {
    NoGradGuard no_grad;
    want = models[0]->forward(x).to_vector<float>();
  }
  const std::vector<float> got = load(path + ".json").run({x})[0].to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  EXPECT_FALSE(std::filesystem::exists(second_params));
}

// Verifies that an export removes only the params files its path owns: not
// a checkpoint that happens to be called `path`.params unless the old graph
// file named it, nor another model's (here "m.0badf00d", exported by an
// earlier version, whose params file "m.0badf00d.params" looks like one of
// m's).
TEST(ExportLoad, ExportRemovesOnlyItsOwnParamsFiles) {
  ScratchDir dir;
  std::shared_ptr<nn::Module> models[2] = {testing::writer_model(0), testing::writer_model(1)};
  for (auto& model : models) testing::prepare_export(*model);
  // `path`.json names `old_name` instead of the params file it was exported with.
  auto rename_params = [](const std::string& path, const std::string& old_name) {
    const std::string current = params_path_of(path + ".json");
    const std::string json = replace_first(
        read_bytes(path + ".json"), std::filesystem::path(current).filename().string(), old_name);
    std::filesystem::rename(current, std::filesystem::path(path).parent_path() / old_name);
    std::ofstream(path + ".json") << json;
    EXPECT_NO_THROW(load(path + ".json"));
  };
  const std::string path = dir.file("m");
  models[0]->save(path + ".params");  // A checkpoint, no export's.
  models[0]->export_model(dir.file("m.0badf00d"));
  rename_params(dir.file("m.0badf00d"), "m.0badf00d.params");
  models[0]->export_model(path);
  models[1]->export_model(path);
  EXPECT_EQ(nn::read_state_dict(path + ".params").size(), 4u);
  EXPECT_NO_THROW(load(dir.file("m.0badf00d.json")));

  // A graph file from before that named m.params: superseded, so removed.
  std::filesystem::remove(path + ".params");
  rename_params(path, "m.params");
  models[0]->export_model(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".params"));
  EXPECT_NO_THROW(load(path + ".json"));
  EXPECT_NO_THROW(load(dir.file("m.0badf00d.json")));
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names.size(), 4u) << ::testing::PrintToString(names);
}

// Verifies that an export that fails after its params file is in place (a
// full disk while the graph file is written; here a file-size limit that
// the params file fits under) leaves the old model, and neither the new
// params file nor a temporary file.
TEST(ExportLoad, AFailedExportLeavesTheOldModel) {
  ScratchDir dir;
  std::shared_ptr<nn::Module> models[2] = {testing::writer_model(0), testing::writer_model(1)};
  for (auto& model : models) testing::prepare_export(*model);
  const std::string path = dir.file("m");
  models[0]->export_model(path);
  const std::string params = params_path_of(path + ".json");
  const uint64_t limit = std::filesystem::file_size(params) + 64;
  ASSERT_LT(limit, std::filesystem::file_size(path + ".json"));
  rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = limit;
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  // Unchecked: the check's trial copy (elsewhere) would hit the limit first.
  expect_error([&] { models[1]->export_model(path, {.check = false}); },
               {"cannot write '" + path + ".json'", "File too large"});
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names,
              ::testing::ElementsAre(std::filesystem::path(params).filename().string(), "m.json"));
  EXPECT_NO_THROW(load(path + ".json"));
}

// JSON has no infinities or NaN: the format spells them as strings.
TEST(ExportLoad, NonFiniteFloatAttributesRoundTrip) {
  const double inf = std::numeric_limits<double>::infinity();
  HybridFunction f([inf](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{
        add(clip(in[0], -inf, 0.5), leaky_relu(in[0], std::numeric_limits<double>::quiet_NaN()))};
  });
  Tensor x = Tensor::from_vector<float>({-2, -0.5, 0.25, 3}, Shape{4});
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = f({x})[0];
  }
  ScratchDir dir;
  f.export_model(dir.file("f"), {}, {.dynamic_batch = false});
  std::vector<float> got = load(dir.file("f")).run({x})[0].to_vector<float>();
  std::vector<float> want = expected.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) << i;
  }
}

TEST(ExportLoad, AGraphThatPinsTheBatchIsRefusedUnlessFixed) {
  // Flattening the batch into one dimension cannot follow another batch size.
  HybridFunction f(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{reshape(in[0], {8})}; });
  {
    NoGradGuard no_grad;
    f({randn({2, 4})});
  }
  ScratchDir dir;
  expect_error(
      [&] { f.export_model(dir.file("f")); },
      {"tracing at batch = 3", "to free batch failed", "reshape", "dynamic_batch = false"});
  f.export_model(dir.file("f"), {}, {.dynamic_batch = false});
  EXPECT_EQ(load(dir.file("f")).run({randn({2, 4})})[0].shape(), Shape({8}));
}

// Verifies that export checks what it writes: a graph whose answers differ
// from the eager function's (here host state the trace froze) is refused,
// naming the output and the node that made it, and leaves the files an
// earlier export wrote as they were; check = false writes it anyway. (With
// the batch free, the traces at other batch sizes already see the scalar
// move, and the fit refuses it.)
TEST(ExportLoad, ExportRefusesFilesWhoseAnswersDifferFromEager) {
  double scale = 1;
  HybridFunction f([&](const std::vector<Tensor>& in) {
    scale += 1;  // Host state: the graph keeps the traced 2, eager moves on.
    return std::vector<Tensor>{relu(mul(in[0], scale))};
  });
  {
    NoGradGuard no_grad;
    f({randn({2, 3})});
  }
  ScratchDir dir;
  const ExportOptions fixed{.dynamic_batch = false};
  const ExportOptions unchecked{.dynamic_batch = false, .check = false};
  f.export_model(dir.file("old"), {}, unchecked);  // An earlier export.
  const std::string old_json = read_bytes(dir.file("old.json"));
  expect_error([&] { f.export_model(dir.file("old"), {}, fixed); },
               {"export_model(", "another answer than the eager model", "output 0", "host state",
                "made by node 1 (relu", "model_test.cc", "Nothing was written"});
  EXPECT_EQ(read_bytes(dir.file("old.json")), old_json);
  expect_error([&] { f.export_model(dir.file("old")); },
               {"export_model(", "read by mul at", "made on the host, whose values differ"});
  EXPECT_EQ(read_bytes(dir.file("old.json")), old_json);
  expect_error([&] { f.export_model(dir.file("new"), {}, fixed); }, {"another answer"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("new.json")));
  f.export_model(dir.file("new"), {}, unchecked);
  EXPECT_TRUE(std::filesystem::exists(dir.file("new.json")));
}

// A module that flattens with a view (Tensor::reshape), not an op.
struct ViewFlatten : nn::Module {
  ViewFlatten() { fc = register_module("fc", std::make_shared<nn::Linear>(12, 3)); }
  Tensor forward(const Tensor& x) override {
    return fc->forward(x.reshape({x.shape()[0], x.numel() / x.shape()[0]}));
  }
  std::shared_ptr<nn::Linear> fc;
};

// Verifies that a Tensor::reshape view inside a hybridized forward exports
// with a free batch: the view is recorded as one reshape of the batched
// value (it used to be flatten -> reshape at the traced batch size, which no
// other batch size fits).
TEST(ExportLoad, AViewReshapeKeepsTheBatchFree) {
  ViewFlatten model;
  model.eval();
  hybridized_call(model, randn({2, 3, 4}));
  ScratchDir dir;
  model.export_model(dir.file("m"));
  LoadedModel loaded = load(dir.file("m"));
  for (int64_t batch : {1, 2, 5}) {
    Tensor x = randn({batch, 3, 4});
    expect_close(loaded.run({x})[0], eager_forward(model, x));
  }
}

// A view that drops the last row of the batch: at another batch size eager
// drops that batch's last row.
struct AllButLast : nn::Module {
  Tensor forward(const Tensor& x) override { return relu(x.slice(0, x.shape()[0] - 1)); }
};

// Verifies that a view of some rows of the batch follows the batch (its
// bound is batch - 1, which the export fits; it used to be refused, and
// before that ran at other batch sizes with the traced rows: wrong answers).
TEST(ExportLoad, AViewOfSomeRowsOfTheBatchFollowsIt) {
  AllButLast model;
  hybridized_call(model, randn({3, 2}));
  ScratchDir dir;
  model.export_model(dir.file("m"));
  LoadedModel loaded = load(dir.file("m"));
  EXPECT_EQ(loaded.outputs()[0].shape_text(), "[batch - 1, 2]");
  for (int64_t batch : {2, 3, 7}) {
    Tensor x = randn({batch, 2});
    expect_close(loaded.run({x})[0], eager_forward(model, x));
  }
}

}  // namespace
}  // namespace tandem
