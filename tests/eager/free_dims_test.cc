// Free dimensions (ExportOptions::dynamic_dims, trace/symbolic_shapes.h): a
// model exported once with named free dimensions gives the eager model's
// answers at sizes it was never traced at, and what no one graph can follow
// is refused at export or at run time with the dimension and the node.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "eager/optim/optim.h"
#include "serialization/model.h"
#include "tests/eager/float64_values.h"
#include "tests/error_of.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using testing::error_of;
using testing::expect_near;
using ::testing::HasSubstr;
using testing::Values;
using testing::values_of;

class FreeDims : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / str_cat("tandem-free-dims-", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

constexpr int64_t kVocab = 11, kModel = 8, kMaxLen = 12;

// A causal transformer language model over token ids [batch, seq]: what
// tutorial 05 exports.
struct TinyLanguageModel : nn::Module {
  TinyLanguageModel() {
    embed = register_module("embed", std::make_shared<nn::Embedding>(kVocab, kModel));
    positions = register_module(
        "positions", std::make_shared<nn::PositionalEncoding>(nn::PositionalEncodingOptions{
                         .d_model = kModel, .max_len = kMaxLen, .dropout = 0.0}));
    encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder>(
                                             nn::TransformerLayerOptions{.d_model = kModel,
                                                                         .nhead = 2,
                                                                         .dim_feedforward = 16,
                                                                         .dropout = 0.0,
                                                                         .causal = true},
                                             2));
    head = register_module("head", std::make_shared<nn::Linear>(kModel, kVocab));
  }
  Tensor forward(const Tensor& tokens) override {
    return (*head)((*encoder)((*positions)((*embed)(tokens))));
  }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::PositionalEncoding> positions;
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::Linear> head;
};

Tensor tokens(int64_t batch, int64_t seq) {
  return cast(mul(rand({batch, seq}), static_cast<double>(kVocab) - 0.01), DType::kInt64);
}

// The module's own forward, which runs eagerly whether or not the module
// is hybridized.
Values eager_values(nn::Module& model, const Tensor& x) {
  NoGradGuard no_grad;
  return values_of(model.forward(x));
}

// Verifies that one export with batch and seq free gives the eager model's
// answers at sizes on both sides of the traced ones, including 1, and that
// its signature spells the free sizes.
TEST_F(FreeDims, ALanguageModelFollowsBatchAndSequence) {
  manual_seed(5);
  TinyLanguageModel model;
  model.eval();
  model.hybridize();
  {
    NoGradGuard no_grad;
    model(tokens(3, 7));
  }
  model.export_model(path("lm"), {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
  LoadedModel loaded = load(path("lm"));
  EXPECT_EQ(loaded.inputs()[0].shape_text(), "[batch, seq]");
  EXPECT_EQ(loaded.outputs()[0].shape_text(), str_cat("[batch, seq, ", kVocab, "]"));
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{3, 7}, {1, 1}, {2, 12}, {5, 3}, {4, 9}}) {
    SCOPED_TRACE(str_cat("batch ", batch, ", seq ", seq));
    Tensor x = tokens(batch, seq);
    expect_near(values_of(loaded.run({x})[0]), eager_values(model, x), 1e-4);
  }
  // The positional table has kMaxLen rows: the limit the trace found.
  const std::string error = error_of([&] { loaded.run({tokens(2, kMaxLen + 1)}); });
  EXPECT_THAT(error, AllOf(HasSubstr("seq = 13 is more than the model allows"),
                           HasSubstr(str_cat("seq <= ", kMaxLen)),
                           HasSubstr("(slice in 'positions', traced at eager/free_dims_test.cc")));
  // A fixed dimension stays fixed, and the message spells the free ones.
  EXPECT_THAT(error_of([&] {
                loaded.run({tokens(2, 3).reshape({2, 3, 1})});
              }),
              HasSubstr("must have shape [batch, seq], got [2, 3, 1]"));
}

// Verifies the same of the default export (batch free) for a model that
// flattens by hand: the flattened size is batch*features, which the old
// exporter's rewrite of dimension 0 could not express.
TEST_F(FreeDims, AFlattenOfTheBatchFollowsIt) {
  HybridFunction f([](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    Tensor flat = reshape(x, {x.shape()[0] * x.shape()[1]});
    return std::vector<Tensor>{reshape(relu(flat), {x.shape()[0], x.shape()[1]})};
  });
  {
    NoGradGuard no_grad;
    f({randn({4, 3})});
  }
  f.export_model(path("flat"));
  LoadedModel loaded = load(path("flat"));
  for (int64_t batch : {1, 4, 6}) {
    Tensor x = randn({batch, 3});
    expect_near(values_of(loaded.run({x})[0]), values_of(relu(x)), 0);
  }
}

// Verifies that one name on two inputs is one size: the loaded model
// refuses inputs that disagree on it.
TEST_F(FreeDims, ANameSharedByTwoInputsIsOneSize) {
  HybridFunction f([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{matmul(in[0], transpose(in[1], {1, 0}))};
  });
  {
    NoGradGuard no_grad;
    f({randn({5, 4}), randn({6, 4})});
  }
  f.export_model(path("mm"), {},
                 {.dynamic_dims = {{"input0", {{0, "rows"}, {-1, "k"}}}, {"input1", {{1, "k"}}}}});
  LoadedModel loaded = load(path("mm"));
  Tensor a = randn({2, 9}), b = randn({6, 9});
  expect_near(values_of(loaded.run({a, b})[0]), values_of(matmul(a, transpose(b, {1, 0}))), 1e-5);
  EXPECT_THAT(error_of([&] {
                loaded.run({randn({2, 9}), randn({6, 8})});
              }),
              AllOf(HasSubstr("input 'input1' has k = 8"), HasSubstr("'input0' has k = 9")));
}

// Verifies that what no polynomial of the free dimensions gives (half the
// sequence, rounded down) is refused at export, naming the node and the
// sizes seen, and that nothing is written.
TEST_F(FreeDims, ASizeThatIsNoPolynomialIsRefused) {
  HybridFunction f([](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    return std::vector<Tensor>{slice(x, 1, 0, x.shape()[1] / 2, 1)};
  });
  {
    NoGradGuard no_grad;
    f({randn({2, 8})});
  }
  const std::string error = error_of([&] {
    f.export_model(path("half"), {}, {.dynamic_dims = {{"input0", {{1, "seq"}}}}});
  });
  EXPECT_THAT(error, AllOf(HasSubstr("export_model("),
                           HasSubstr("attribute 'end' of node 0 (slice, traced at "
                                     "eager/free_dims_test.cc"),
                           HasSubstr("4 at seq = 8, 3 at seq = 7, 3 at seq = 6"),
                           HasSubstr("no sum of products")));
  EXPECT_FALSE(fs::exists(path("half.json")));
}

// Verifies that code that branches on a size, and a tensor made on the host
// at a size, are refused at export with what they are.
TEST_F(FreeDims, CodeThatTakesAnotherPathOrHostTensorsAreRefused) {
  HybridFunction branches([](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    return std::vector<Tensor>{x.shape()[1] > 6 ? relu(x) : sigmoid(x)};
  });
  HybridFunction host([](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    std::vector<float> ramp(static_cast<size_t>(x.shape()[1]));
    for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i);
    return std::vector<Tensor>{add(x, Tensor::from_vector(ramp, Shape{x.shape()[1]}))};
  });
  NoGradGuard no_grad;
  branches({randn({2, 7})});
  host({randn({2, 7})});
  const ExportOptions seq_free{.dynamic_dims = {{"input0", {{1, "seq"}}}}};
  EXPECT_THAT(error_of([&] { branches.export_model(path("b"), {}, seq_free); }),
              AllOf(HasSubstr("takes another path at other sizes"), HasSubstr("seq = 6")));
  EXPECT_THAT(error_of([&] { host.export_model(path("h"), {}, seq_free); }),
              AllOf(HasSubstr("captured tensor"), HasSubstr("[7]"), HasSubstr("from_vector")));
}

// Verifies that a scalar computed on the host from a size (a mean by hand,
// sum / seq) is refused at export, naming the op that reads it and its
// line, rather than frozen at the traced size.
TEST_F(FreeDims, AScalarComputedFromASizeIsRefused) {
  HybridFunction mean_by_hand([](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    return std::vector<Tensor>{div(sum(x, {1}), static_cast<double>(x.shape()[1]))};
  });
  NoGradGuard no_grad;
  mean_by_hand({randn({2, 7})});
  const std::string error = error_of([&] {
    mean_by_hand.export_model(path("m"), {}, {.dynamic_dims = {{"input0", {{1, "seq"}}}}});
  });
  EXPECT_THAT(error,
              AllOf(HasSubstr("float32[]"), HasSubstr("read by div at eager/free_dims_test.cc"),
                    HasSubstr("whose values differ at seq = 6 from those at seq = 7"),
                    HasSubstr("full, arange")));
  EXPECT_FALSE(fs::exists(path("m.json")));
}

// Verifies that the names given are checked against the inputs.
TEST_F(FreeDims, BadNamesAndAxesAreRefused) {
  HybridFunction f([](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(in[0])}; });
  NoGradGuard no_grad;
  f({randn({2, 3})});
  EXPECT_THAT(error_of([&] {
                f.export_model(path("f"), {}, {.dynamic_dims = {{"x", {{0, "n"}}}}});
              }),
              HasSubstr("names input 'x', but the model's inputs are input0"));
  EXPECT_THAT(error_of([&] {
                f.export_model(path("f"), {}, {.dynamic_dims = {{"input0", {{2, "n"}}}}});
              }),
              HasSubstr("axis 2 of input 'input0', which has shape [2, 3]"));
  EXPECT_THAT(error_of([&] {
                f.export_model(path("f"), {}, {.dynamic_dims = {{"input0", {{0, "a b"}}}}});
              }),
              HasSubstr("'a b' (axis 0 of input 'input0') is not a valid dimension name"));
  EXPECT_THAT(error_of([&] {
                f.export_model(path("f"), {}, {.dynamic_dims = {{"input0", {{0, "n"}, {1, "n"}}}}});
              }),
              HasSubstr("one name is one size"));
}

// Verifies that a hybridized inference forward with free dimensions traces
// once and serves other lengths and batch sizes by instantiating that trace,
// with the eager answers; that sizes past a limit fall back to a trace, which
// answers as eager code does; and that a call computing gradients traces per
// shape, with a warning.
// Indexing, running and ordering ops over a free batch and sequence: the
// ops whose attributes or outputs depend on a free size (positions from
// argsort and argmax, one_hot's fixed classes, running sums along seq).
std::vector<Tensor> indexing_program(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];  // [batch, seq]
  ValuesAndIndices sorted = sort(x, -1, /*descending=*/true);
  Tensor regathered = gather(x, sorted.indices, 1);
  Tensor spread = scatter_add(mul(x, 0.0), argsort(x), sorted.values, 1);
  Tensor running = add(cumsum(x, 1), cumprod(add(mul(tanh(x), 0.25), 1.0), 1, false, true));
  Tensor top = topk(x, 2, -1, /*largest=*/false).values;  // [batch, 2]
  Tensor best = reshape(argmax(x, -1), {x.shape()[0], 1});
  Tensor picked = gather_nd(x, best, 1);                           // [batch]
  Tensor hot = cast(one_hot(argmax(x, -1), 16), DType::kFloat32);  // [batch, 16]
  Tensor product = prod(add(mul(sigmoid(x), 0.5), 0.75), {1});     // [batch]
  return {add(regathered, spread), running, top, add(picked, product), hot};
}

// Verifies that the indexing, scan and ordering ops export with batch and
// seq free and give the eager answers at sizes the trace never saw, and
// that hybridize serves those sizes from one trace.
TEST_F(FreeDims, IndexingScanAndOrderingOpsFollowBatchAndSequence) {
  HybridFunction f(indexing_program);
  {
    NoGradGuard no_grad;
    f({randn({3, 7})});
  }
  f.export_model(path("indexing"), {}, {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
  LoadedModel loaded = load(path("indexing"));
  EXPECT_EQ(loaded.inputs()[0].shape_text(), "[batch, seq]");
  HybridFunction hybrid(indexing_program,
                        {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
  NoGradGuard no_grad;
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{3, 7}, {1, 2}, {2, 13}, {5, 3}}) {
    SCOPED_TRACE(str_cat("batch ", batch, ", seq ", seq));
    Tensor x = randn({batch, seq});
    std::vector<Tensor> expected = indexing_program({x});
    std::vector<Tensor> from_file = loaded.run({x});
    std::vector<Tensor> replayed = hybrid({x});
    ASSERT_EQ(from_file.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      expect_near(values_of(from_file[i]), values_of(expected[i]), 1e-5);
      expect_near(values_of(replayed[i]), values_of(expected[i]), 1e-5);
    }
  }
  EXPECT_EQ(hybrid.stats().traces, 1);
  // Two smallest of one: refused by every mode, naming topk.
  EXPECT_THAT(error_of([&] { loaded.run({randn({2, 1})}); }), HasSubstr("k = 2 must be in [0, 1]"));
  EXPECT_THAT(error_of([&] { hybrid({randn({2, 1})}); }), HasSubstr("k = 2 must be in [0, 1]"));
}

TEST_F(FreeDims, HybridizeServesEverySizeFromOneTrace) {
  manual_seed(6);
  TinyLanguageModel model;
  model.eval();
  model.hybridize(true, {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
  NoGradGuard no_grad;
  for (auto [batch, seq] :
       {std::pair<int64_t, int64_t>{3, 7}, {2, 5}, {4, 12}, {1, 1}, {3, 7}, {2, 5}}) {
    SCOPED_TRACE(str_cat("batch ", batch, ", seq ", seq));
    Tensor x = tokens(batch, seq);
    expect_near(values_of(model(x)), eager_values(model, x), 1e-4);
  }
  const HybridFunction& hybrid = *model.hybrid_forward();
  EXPECT_EQ(hybrid.stats().traces, 1);
  EXPECT_EQ(hybrid.stats().instantiations, 3);
  EXPECT_EQ(hybrid.stats().replays, 2);
  EXPECT_THAT(error_of([&] { model(tokens(1, kMaxLen + 1)); }),
              HasSubstr(str_cat("more than max_len = ", kMaxLen)));
}

// The language model's loss: every position predicts the next token.
Tensor next_token_loss(nn::Module& model, const Tensor& tokens, const Tensor& targets) {
  const int64_t positions = tokens.shape()[0] * tokens.shape()[1];
  return cross_entropy(reshape(model(tokens), {positions, kVocab}), reshape(targets, {positions}));
}

const tandem::FreeDims kTokensAndTargets = {{"input0", {{0, "batch"}, {1, "seq"}}},
                                            {"input1", {{0, "batch"}, {1, "seq"}}}};

// Verifies that a whole training step (forward, backward, clipping, Adam)
// hybridized with batch and seq free is traced once, serves every other
// size from that trace, and trains exactly as the same step run eagerly:
// the runs at other sizes that fit the family leave no trace in the
// parameters, the optimizer's state or the gradients.
TEST_F(FreeDims, HybridizeServesATrainingStepAtEverySize) {
  manual_seed(8);
  TinyLanguageModel eager_model;
  manual_seed(8);
  TinyLanguageModel hybrid_model;
  optim::Adam eager_adam(eager_model.parameters(), {.lr = 0.01});
  optim::Adam hybrid_adam(hybrid_model.parameters(), {.lr = 0.01});
  auto step_of = [](TinyLanguageModel& model, optim::Adam& adam) {
    return [&model, &adam](const std::vector<Tensor>& in) {
      adam.zero_grad();
      Tensor loss = next_token_loss(model, in[0], in[1]);
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 1.0);
      adam.step();
      return std::vector<Tensor>{loss};
    };
  };
  auto eager_step = step_of(eager_model, eager_adam);
  HybridFunction hybrid_step(step_of(hybrid_model, hybrid_adam),
                             {.dynamic_dims = kTokensAndTargets, .name = "step"});
  ::testing::internal::CaptureStderr();
  for (auto [batch, seq] :
       {std::pair<int64_t, int64_t>{3, 7}, {2, 5}, {4, 12}, {1, 1}, {3, 7}, {2, 9}, {2, 5}}) {
    SCOPED_TRACE(str_cat("batch ", batch, ", seq ", seq));
    const Tensor x = tokens(batch, seq), y = tokens(batch, seq);
    expect_near(values_of(hybrid_step({x, y})[0]), values_of(eager_step({x, y})[0]), 1e-5);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(hybrid_step.stats().traces, 1);
  EXPECT_EQ(hybrid_step.stats().instantiations, 4);
  EXPECT_EQ(hybrid_step.stats().replays, 2);
  const std::vector<Tensor> eager_parameters = eager_model.parameters();
  const std::vector<Tensor> hybrid_parameters = hybrid_model.parameters();
  for (size_t i = 0; i < eager_parameters.size(); ++i) {
    SCOPED_TRACE(str_cat("parameter ", i));
    expect_near(values_of(hybrid_parameters[i]), values_of(eager_parameters[i]), 1e-5);
    expect_near(values_of(hybrid_parameters[i].grad()), values_of(eager_parameters[i].grad()),
                1e-5);
  }
  // Past the positional table: a trace, which fails as eager code does.
  EXPECT_THAT(error_of([&] {
                hybrid_step({tokens(1, kMaxLen + 1), tokens(1, kMaxLen + 1)});
              }),
              HasSubstr("max_len"));
}

// Verifies the same of a step whose sizes enter as values: batch norm's
// unbiased running variance (n / (n - 1)) and the mean squared error's
// gradient (2 / numel); at batch 1, which batch norm refuses in training,
// both fail alike.
TEST_F(FreeDims, HybridizeServesABatchNormStepAtEveryBatch) {
  auto make = [] {
    manual_seed(11);
    return nn::Sequential(nn::Linear(3, 4), nn::BatchNorm1d(4), nn::Tanh(), nn::Linear(4, 2));
  };
  nn::Sequential eager_model = make(), hybrid_model = make();
  optim::SGD eager_sgd(eager_model.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD hybrid_sgd(hybrid_model.parameters(), {.lr = 0.1, .momentum = 0.9});
  auto step_of = [](nn::Sequential& model, optim::SGD& sgd) {
    return [&model, &sgd](const std::vector<Tensor>& in) {
      sgd.zero_grad();
      Tensor loss = mse_loss(model(in[0]), in[1]);
      loss.backward();
      sgd.step();
      return std::vector<Tensor>{loss};
    };
  };
  auto eager_step = step_of(eager_model, eager_sgd);
  HybridFunction hybrid_step(
      step_of(hybrid_model, hybrid_sgd),
      {.dynamic_dims = {{"input0", {{0, "batch"}}}, {"input1", {{0, "batch"}}}}, .name = "bn"});
  ::testing::internal::CaptureStderr();
  for (int64_t batch : {5, 3, 8, 5, 2}) {
    SCOPED_TRACE(str_cat("batch ", batch));
    const Tensor x = randn({batch, 3}), y = randn({batch, 2});
    expect_near(values_of(hybrid_step({x, y})[0]), values_of(eager_step({x, y})[0]), 1e-5);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(hybrid_step.stats().traces, 1);
  EXPECT_EQ(hybrid_step.stats().instantiations, 3);
  const std::vector<Tensor> one{randn({1, 3}), randn({1, 2})};
  EXPECT_THAT(error_of([&] { hybrid_step(one); }),
              HasSubstr("expected more than 1 value per channel when training"));
  EXPECT_THAT(error_of([&] { eager_step(one); }),
              HasSubstr("expected more than 1 value per channel when training"));
  const nn::StateDict eager_state = eager_model.state_dict();
  const nn::StateDict hybrid_state = hybrid_model.state_dict();
  for (const auto& [name, tensor] : eager_state) {
    SCOPED_TRACE(name);
    expect_near(values_of(hybrid_state.at(name)), values_of(tensor), 1e-5);
  }
}

// Verifies the same of a module's differentiable forward (its backward a
// traced graph too), trained by eager code around it.
TEST_F(FreeDims, HybridizeServesADifferentiableForwardAtEverySize) {
  manual_seed(9);
  TinyLanguageModel eager_model;
  manual_seed(9);
  TinyLanguageModel hybrid_model;
  hybrid_model.hybridize(true, {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
  optim::SGD eager_sgd(eager_model.parameters(), 0.1);
  optim::SGD hybrid_sgd(hybrid_model.parameters(), 0.1);
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{3, 7}, {2, 5}, {1, 11}, {3, 7}}) {
    SCOPED_TRACE(str_cat("batch ", batch, ", seq ", seq));
    const Tensor x = tokens(batch, seq), y = tokens(batch, seq);
    for (auto [model, sgd] : {std::pair<nn::Module*, optim::SGD*>{&eager_model, &eager_sgd},
                              {&hybrid_model, &hybrid_sgd}}) {
      sgd->zero_grad();
      next_token_loss(*model, x, y).backward();
      sgd->step();
    }
    const std::vector<Tensor> eager_parameters = eager_model.parameters();
    const std::vector<Tensor> hybrid_parameters = hybrid_model.parameters();
    for (size_t i = 0; i < eager_parameters.size(); ++i) {
      SCOPED_TRACE(str_cat("parameter ", i));
      expect_near(values_of(hybrid_parameters[i].grad()), values_of(eager_parameters[i].grad()),
                  1e-5);
    }
  }
  const HybridFunction& hybrid = *hybrid_model.hybrid_forward();
  EXPECT_EQ(hybrid.stats().traces, 1);
  EXPECT_EQ(hybrid.stats().instantiations, 2);
}

// Verifies that a step whose family cannot be fitted (a reshape to a size
// that is no polynomial of the free dimension) says so once, traces per
// shape, and still trains as eager code does: the failed fit's runs at
// other sizes changed nothing.
TEST_F(FreeDims, AStepNoFamilyFitsTracesPerShapeAndKeepsItsState) {
  manual_seed(10);
  nn::Linear eager_layer(4, 3);
  manual_seed(10);
  nn::Linear hybrid_layer(4, 3);
  optim::SGD eager_sgd(eager_layer.parameters(), 0.1);
  optim::SGD hybrid_sgd(hybrid_layer.parameters(), 0.1);
  auto step_of = [](nn::Linear& layer, optim::SGD& sgd) {
    return [&layer, &sgd](const std::vector<Tensor>& in) {
      sgd.zero_grad();
      const int64_t half = in[0].shape()[0] / 2;  // Floor division: no polynomial.
      Tensor loss = sum(layer(slice(in[0], 0, 0, half)));
      loss.backward();
      sgd.step();
      return std::vector<Tensor>{loss};
    };
  };
  auto eager_step = step_of(eager_layer, eager_sgd);
  HybridFunction hybrid_step(step_of(hybrid_layer, hybrid_sgd),
                             {.dynamic_dims = {{"input0", {{0, "batch"}}}}, .name = "halves"});
  ::testing::internal::CaptureStderr();
  for (int64_t batch : {6, 5, 8, 6}) {
    const Tensor x = randn({batch, 4});
    expect_near(values_of(hybrid_step({x})[0]), values_of(eager_step({x})[0]), 1e-5);
  }
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(hybrid_step.stats().traces, 3);
  EXPECT_EQ(hybrid_step.stats().instantiations, 0);
  EXPECT_THAT(warnings, HasSubstr("hybridize 'halves' traces once per shape despite dynamic_dims"));
  expect_near(values_of(hybrid_layer.weight()), values_of(eager_layer.weight()), 1e-6);
  expect_near(values_of(hybrid_layer.bias()), values_of(eager_layer.bias()), 1e-6);
}

// A GRU cell stepped along the sequence in user code: a trace unrolls the
// loop at the traced length. Returns the last h.
struct GruCellLoop : nn::Module {
  GruCellLoop() {
    cell = register_module("cell", std::make_shared<nn::GRUCell>(nn::RecurrentCellOptions{
                                       .input_size = 3, .hidden_size = 4}));
  }
  Tensor forward(const Tensor& x) override {
    nn::RecurrentState state;
    for (int64_t t = 0; t < x.shape()[1]; ++t) {
      Tensor step = reshape(slice(x, 1, t, t + 1), {x.shape()[0], x.shape()[2]});
      state = cell->forward(step, state);
    }
    return state.h;
  }
  std::shared_ptr<nn::GRUCell> cell;
};

// Verifies that every recurrent layer, whose recurrence is one op, exports
// with its sequence free and runs at lengths it was not traced at, while a
// loop of cell steps has no one graph for every length: refused with why
// (a free batch is fine).
TEST_F(FreeDims, RecurrentLayersFreeTheSequenceAnUnrolledLoopCannot) {
  for (nn::RecurrentKind kind : {nn::RecurrentKind::kRnnTanh, nn::RecurrentKind::kRnnRelu,
                                 nn::RecurrentKind::kLstm, nn::RecurrentKind::kGru}) {
    manual_seed(2);
    nn::Recurrent layer(
        kind, {.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true});
    SCOPED_TRACE(layer.type_name());
    layer.eval();
    layer.hybridize();
    {
      NoGradGuard no_grad;
      layer(randn({2, 5, 3}));
    }
    const std::string name = str_cat("layer", static_cast<int>(kind));
    layer.export_model(path(name), {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
    LoadedModel loaded = load(path(name));
    EXPECT_EQ(loaded.inputs()[0].shape_text(), "[batch, seq, 3]");
    for (const Dims& shape : {Dims{2, 5, 3}, Dims{3, 1, 3}, Dims{1, 17, 3}}) {
      Tensor x = randn(shape);
      expect_near(values_of(loaded.run({x})[0]), eager_values(layer, x), 1e-5);
    }
  }

  manual_seed(3);
  GruCellLoop loop;
  loop.eval();
  loop.hybridize();
  {
    NoGradGuard no_grad;
    loop(randn({2, 5, 3}));
  }
  EXPECT_THAT(
      error_of([&] {
        loop.export_model(path("loop"), {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
      }),
      HasSubstr("its code takes another path at other sizes"));
  loop.export_model(path("loop"));  // Batch only.
  LoadedModel loaded_loop = load(path("loop"));
  Tensor x = randn({6, 5, 3});
  expect_near(values_of(loaded_loop.run({x})[0]), eager_values(loop, x), 1e-5);
}

}  // namespace
}  // namespace tandem
