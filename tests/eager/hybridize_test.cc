// hybridize against eager: outputs and gradients of small models, training
// runs step for step, retracing, the cache, strict mode, verify mode, and
// the errors of code a trace cannot follow.
#include "eager/hybridize.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "eager/autograd.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "eager/optim/optim.h"
#include "tests/scoped_env.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

std::vector<double> values(const Tensor& t) { return cast(t, DType::kFloat64).to_vector<double>(); }

void expect_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(a.shape(), b.shape());
  std::vector<double> x = values(a), y = values(b);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(x[i], y[i], atol + rtol * std::abs(y[i])) << "element " << i;
  }
}

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 32), nn::ReLU(),
                                          nn::Linear(32, 10));
}

std::shared_ptr<nn::Sequential> make_cnn() {
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, 4, 3, 1, 1), nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(4 * 4 * 4, 16), nn::ReLU(), nn::Dropout(0.25), nn::Linear(16, 10));
}

// y = relu(x + fc2(relu(fc1(x)))).
struct Residual : nn::Module {
  Residual() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 16));
  }
  Tensor forward(const Tensor& x) override {
    return relu(add(x, fc2->forward(relu(fc1->forward(x)))));
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// An Elman cell unrolled over the leading axis: h = tanh(W x_t + U h).
struct Recurrent : nn::Module {
  Recurrent() {
    in = register_module("in", std::make_shared<nn::Linear>(8, 16));
    hidden = register_module("hidden", std::make_shared<nn::Linear>(16, 16, false));
  }
  Tensor forward(const Tensor& xs) override {
    Tensor h = zeros({xs.shape()[1], 16});
    for (int64_t t = 0; t < xs.shape()[0]; ++t)
      h = tanh(add(in->forward(xs[t]), hidden->forward(h)));
    return h;
  }
  std::shared_ptr<nn::Linear> in, hidden;
};

// Inference: the hybridized module's outputs equal eager ones, first call
// (traced) and later calls (replayed) alike.
void check_inference(nn::Module& model, const std::vector<int64_t>& input_shape) {
  model.eval();
  NoGradGuard no_grad;
  std::vector<Tensor> xs;
  for (int i = 0; i < 3; ++i) xs.push_back(randn(input_shape));
  std::vector<Tensor> eager;
  for (const Tensor& x : xs) eager.push_back(model(x));
  model.hybridize();
  for (size_t i = 0; i < xs.size(); ++i) expect_close(model(xs[i]), eager[i]);
  ASSERT_NE(model.hybrid_forward(), nullptr);
  EXPECT_EQ(model.hybrid_forward()->stats().traces, 1);
  EXPECT_EQ(model.hybrid_forward()->stats().replays, 2);
}

TEST(HybridizeTest, MlpInferenceMatchesEager) {
  auto m = make_mlp();
  check_inference(*m, {4, 1, 8, 8});
}
TEST(HybridizeTest, CnnInferenceMatchesEager) {
  auto m = make_cnn();
  check_inference(*m, {2, 1, 8, 8});
}
TEST(HybridizeTest, ResidualInferenceMatchesEager) {
  Residual m;
  check_inference(m, {5, 16});
}
TEST(HybridizeTest, RecurrentInferenceMatchesEager) {
  Recurrent m;
  check_inference(m, {32, 3, 8});
}

// Verifies that a hybridized module's graph names the state it reads by the
// parameters' and buffers' paths, as its state_dict() does, in the dumps of
// TANDEM_DUMP_GRAPHS (and so in to_text and errors).
TEST(HybridizeTest, ModuleGraphsNameStateByPath) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-state-names-", ::getpid());
  fs::remove_all(dir);
  auto net = make_cnn();
  net->eval();
  net->hybridize(true, {.name = "cnn"});
  {
    ::tandem::testing::ScopedEnv dump("TANDEM_DUMP_GRAPHS", dir.string());
    NoGradGuard no_grad;
    (*net)(randn({2, 1, 8, 8}));
  }
  std::ifstream file(dir / "cnn.0.traced.txt");
  ASSERT_TRUE(file.good());
  const std::string text(std::istreambuf_iterator<char>(file), {});
  for (const auto& [name, tensor] : net->state_dict()) {
    EXPECT_THAT(text, ::testing::HasSubstr(str_cat("\"", name, "\""))) << text;
  }
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("state0"))) << text;
  fs::remove_all(dir);
}

TEST(HybridizeTest, NewBatchSizeRetracesAndSaysWhy) {
  auto model = make_mlp();
  model->eval();
  model->hybridize();
  NoGradGuard no_grad;
  Tensor a = randn({4, 1, 8, 8}), b = randn({6, 1, 8, 8});
  model->forward(a);
  (*model)(a);
  (*model)(b);
  expect_close((*model)(b), model->forward(b));
  const HybridFunction::Stats& stats = model->hybrid_forward()->stats();
  EXPECT_EQ(stats.traces, 2);
  EXPECT_EQ(stats.replays, 1);
  EXPECT_THAT(stats.last_trace_reason,
              HasSubstr("input 0 changed from float32[4, 1, 8, 8] cpu to float32[6, 1, 8, 8] cpu"));
  (*model)(a);  // Still cached.
  EXPECT_EQ(stats.traces, 2);
  model->train();  // The training flag is part of the signature.
  (*model)(a);
  EXPECT_EQ(stats.traces, 3);
  EXPECT_THAT(stats.last_trace_reason, HasSubstr("mode key changed"));
}

// Verifies that eager views (reshape and flatten share their input's data)
// trace as nodes: replays, at the traced shape and another, give eager's
// values, also for a reshape to the same shape and a view of a view.
TEST(HybridizeTest, ReshapeAndFlattenViewsTraceAsNodes) {
  auto body = [](const std::vector<Tensor>& in) {
    Tensor same = reshape(in[0], {-1, 6});
    Tensor r = reshape(exp(same), {-1, 3, 2});
    return std::vector<Tensor>{add(flatten(r), same), flatten(reshape(r, {-1, 2, 3}), 0)};
  };
  auto f = hybridize(body);
  for (int64_t rows : {2, 2, 5}) {
    Tensor x = randn({rows, 6});
    std::vector<Tensor> want = body({x}), got = f({x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].shape(), want[k].shape());
      EXPECT_EQ(got[k].to_vector<float>(), want[k].to_vector<float>()) << "output " << k;
    }
  }
}

// Verifies Note [A new plan starts from an empty cache]: what eager code
// left in the CPU allocator's cache is given back once a trace is done,
// before the graph's memory plan is allocated.
// Verifies that a tensor and a same-shape flatten of it are two inputs: the
// flatten copies (a view would be the same value to the tracer), and the
// replay reads each input.
TEST(HybridizeTest, AnInputAndItsSameShapeFlattenAreTwoInputs) {
  auto f = hybridize([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sub(in[0], mul(in[1], 2.0))};
  });
  Tensor x = randn({3, 4});
  std::vector<float> want = sub(x, mul(x, 2.0)).to_vector<float>();
  EXPECT_EQ(f({x, flatten(x)})[0].to_vector<float>(), want);
  Tensor other = randn({3, 4});
  EXPECT_EQ(f({x, other})[0].to_vector<float>(), sub(x, mul(other, 2.0)).to_vector<float>());
}

TEST(HybridizeTest, ATraceGivesBackTheAllocatorsCache) {
  Allocator& cpu = allocator_for(Device::cpu());
  constexpr size_t kBig = size_t{16} << 20;
  {
    Tensor big = randn({static_cast<int64_t>(kBig / sizeof(float))});
    big.wait_to_read();
  }
  engine::current().wait_all();  // The block's release runs on the engine.
  ASSERT_GE(cpu.stats().cached, kBig);
  auto f = hybridize([](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; });
  f({randn({4})})[0].wait_to_read();
  EXPECT_LT(cpu.stats().cached, kBig);
}

TEST(HybridizeTest, StrictModeRefusesToRetrace) {
  auto f = hybridize([](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; },
                     {.strict = true});
  f({randn({3})});
  f({randn({3})});
  try {
    f({randn({4})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("strict hybridize"));
    EXPECT_THAT(e.what(), HasSubstr("input 0 changed from float32[3] cpu to float32[4] cpu"));
    EXPECT_THAT(e.what(), HasSubstr("hybridize_test.cc"));
  }
}

TEST(HybridizeTest, CacheIsABoundedLru) {
  int calls = 0;
  auto f = hybridize(
      [&](const std::vector<Tensor>& in) {
        ++calls;
        return std::vector<Tensor>{neg(in[0])};
      },
      {.cache_size = 2, .warn_after_traces = 100});
  Tensor a = randn({1}), b = randn({2}), c = randn({3});
  f({a});
  f({b});
  f({a});  // Replay; a is now the most recent.
  f({c});  // Evicts b.
  f({a});  // Replay.
  EXPECT_EQ(calls, 3);
  f({b});  // Traced again.
  EXPECT_EQ(calls, 4);
  EXPECT_THAT(f.stats().last_trace_reason, HasSubstr("input 0 changed"));
}

// Verifies that retracing is quiet until warn_after_traces, warns once
// there (naming the reason), and never with warn_after_traces = 0.
TEST(HybridizeTest, RetracingWarnsOnceAtTheThresholdOnly) {
  auto traced_at = [](int warn_after_traces, int calls) {
    auto f =
        hybridize([](const std::vector<Tensor>& in) { return std::vector<Tensor>{neg(in[0])}; },
                  {.warn_after_traces = warn_after_traces, .name = "quiet_or_not"});
    ::testing::internal::CaptureStderr();
    for (int64_t n = 1; n <= calls; ++n) f({zeros({n})});
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_EQ(traced_at(4, 3), "");  // Below the threshold: nothing.
  const std::string warned = traced_at(4, 6);
  EXPECT_THAT(warned, HasSubstr("'quiet_or_not' has traced 4 times, the last because input 0 "
                                "changed from float32[3] cpu to float32[4] cpu"));
  EXPECT_EQ(warned.find("tandem:"), warned.rfind("tandem:")) << "warned more than once";
  EXPECT_EQ(traced_at(0, 6), "");
}

TEST(HybridizeTest, ReadingValuesInsideTheTraceIsAnError) {
  auto f = hybridize([](const std::vector<Tensor>& in) {
    Tensor s = sum(in[0]);
    if (s.item<float>() > 0) return std::vector<Tensor>{in[0]};  // Data-dependent.
    return std::vector<Tensor>{neg(in[0])};
  });
  try {
    f({randn({3})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot read a tensor's value while tracing"));
    EXPECT_THAT(e.what(), HasSubstr("hybridize_test.cc"));
  }
  // The failed trace left nothing behind: plain eager code works.
  EXPECT_NO_THROW(sum(randn({3})).item<float>());
}

TEST(HybridizeTest, VerifyFindsHostStateTheTraceFroze) {
  double scale = 1;
  auto f = hybridize(
      [&](const std::vector<Tensor>& in) {
        scale += 1;  // Host state: invisible to the trace.
        return std::vector<Tensor>{mul(in[0], scale)};
      },
      {.verify = true});
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  f({x});  // Traced with scale 2.
  try {
    f({x});  // The graph still multiplies by 2; eager by 3.
    FAIL() << "expected verify to report the difference";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("output 0 differs"));
    EXPECT_THAT(e.what(), HasSubstr("mul"));
    EXPECT_THAT(e.what(), HasSubstr("hybridize_test.cc"));
  }
}

TEST(HybridizeTest, VerifyPassesForAFaithfulTrainingStep) {
  manual_seed(3);
  auto model = make_cnn();
  optim::SGD opt(model->parameters(), 0.05, 0.9);
  auto step = hybridize(
      [&](const std::vector<Tensor>& in) {
        opt.zero_grad();
        Tensor loss = cross_entropy((*model)(in[0]), in[1]);
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss};
      },
      {.verify = true, .verify_calls = 3});
  Tensor y = Tensor::from_vector<int64_t>({1, 7}, {2});
  for (int i = 0; i < 4; ++i) step({randn({2, 1, 8, 8}), y});
  EXPECT_EQ(step.stats().traces, 1);
}

// A training step, hybridized and eager, from the same initial weights and
// data: the losses agree step for step and so do the final weights.
template <class MakeOptimizer>
void check_training(MakeOptimizer make_optimizer) {
  auto run = [&](bool hybridized) {
    manual_seed(42);
    auto model = make_cnn();
    auto opt = make_optimizer(model->parameters());
    HybridFunction::Fn fn = [&](const std::vector<Tensor>& in) {
      opt->zero_grad();
      Tensor loss = cross_entropy((*model)(in[0]), in[1]);
      loss.backward();
      opt->step();
      return std::vector<Tensor>{loss};
    };
    HybridFunction step(fn);
    std::vector<double> losses;
    manual_seed(7);
    for (int i = 0; i < 6; ++i) {
      Tensor x = randn({4, 1, 8, 8});
      Tensor y = Tensor::from_vector<int64_t>({i % 10, (i + 3) % 10, 2, 5}, {4});
      losses.push_back(hybridized ? step({x, y})[0].item<float>() : fn({x, y})[0].item<float>());
    }
    if (hybridized) {
      EXPECT_EQ(step.stats().traces, 1);
      EXPECT_EQ(step.stats().replays, 5);
    }
    return std::make_pair(losses, model);
  };
  auto [eager_losses, eager_model] = run(false);
  auto [graph_losses, graph_model] = run(true);
  for (size_t i = 0; i < eager_losses.size(); ++i) {
    EXPECT_NEAR(graph_losses[i], eager_losses[i], 1e-4 * std::abs(eager_losses[i])) << "step " << i;
  }
  EXPECT_NE(eager_losses.front(), eager_losses.back());  // It trained.
  auto eager_state = eager_model->state_dict(), graph_state = graph_model->state_dict();
  for (const auto& [name, tensor] : eager_state) {
    SCOPED_TRACE(name);
    expect_close(graph_state.at(name), tensor, 1e-3, 1e-5);
  }
}

TEST(HybridizeTest, SgdMomentumTrainingTracksEager) {
  check_training([](std::vector<Tensor> params) {
    return std::make_unique<optim::SGD>(std::move(params), 0.05, 0.9, 0, 1e-4, true);
  });
}

TEST(HybridizeTest, AdamTrainingTracksEager) {
  check_training([](std::vector<Tensor> params) {
    return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 1e-2});
  });
}

TEST(HybridizeTest, GradientsOfAHybridizedStepEqualEager) {
  manual_seed(5);
  Residual model;
  Tensor x = randn({3, 16});
  model.zero_grad();
  sum(mul(model(x), model(x))).backward();
  std::vector<Tensor> eager_grads;
  for (const Tensor& p : model.parameters()) eager_grads.push_back(p.grad());

  auto grads = hybridize([&](const std::vector<Tensor>& in) {
    model.zero_grad();
    Tensor y = model(in[0]);
    Tensor loss = sum(mul(y, y));
    loss.backward();
    return std::vector<Tensor>{loss};
  });
  for (int call = 0; call < 3; ++call) {
    grads({x});
    std::vector<Tensor> params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i) expect_close(params[i].grad(), eager_grads[i]);
  }
  EXPECT_EQ(grads.stats().replays, 2);
}

TEST(HybridizeTest, HybridizedModuleInsideAHybridizedStepIsInlined) {
  auto model = make_mlp();
  model->hybridize();
  auto f = hybridize([&](const std::vector<Tensor>& in) {
    NoGradGuard no_grad;
    return std::vector<Tensor>{(*model)(in[0])};
  });
  Tensor x = randn({2, 1, 8, 8});
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = model->forward(x);
  }
  expect_close(f({x})[0], expected);
  expect_close(f({x})[0], expected);
  EXPECT_EQ(model->hybrid_forward()->stats().eager, 1);
}

// A hybridized module in a plain eager training loop: forward replays a
// graph, backward() flows through its traced backward graph.
TEST(HybridizeTest, HybridizedModuleGradientsEqualEager) {
  for (int model_kind = 0; model_kind < 3; ++model_kind) {
    SCOPED_TRACE(model_kind);
    auto make = [&]() -> std::shared_ptr<nn::Module> {
      if (model_kind == 0) return make_mlp();
      if (model_kind == 1) return std::make_shared<Residual>();
      return make_cnn();
    };
    const std::vector<int64_t> shape =
        model_kind == 1 ? std::vector<int64_t>{3, 16} : std::vector<int64_t>{3, 1, 8, 8};
    manual_seed(11);
    auto eager = make();
    manual_seed(11);
    auto hybrid = make();
    hybrid->hybridize();
    for (int call = 0; call < 3; ++call) {
      Tensor x = randn(shape);
      Tensor xe = x.detach().requires_grad_(), xh = x.detach().requires_grad_();
      const uint64_t seed = random_state();
      Tensor ye = eager->forward(xe);
      manual_seed(seed);  // Same dropout masks.
      Tensor yh = (*hybrid)(xh);
      expect_close(yh, ye);
      eager->zero_grad();
      hybrid->zero_grad();
      sum(mul(ye, ye)).backward();
      sum(mul(yh, yh)).backward();
      expect_close(xh.grad(), xe.grad());
      std::vector<Tensor> pe = eager->parameters(), ph = hybrid->parameters();
      for (size_t i = 0; i < pe.size(); ++i) expect_close(ph[i].grad(), pe[i].grad(), 1e-4, 1e-5);
      auto be = eager->buffers(), bh = hybrid->buffers();  // BatchNorm's running statistics.
      for (size_t i = 0; i < be.size(); ++i) expect_close(bh[i], be[i]);
    }
    EXPECT_EQ(hybrid->hybrid_forward()->stats().traces, 1);
    EXPECT_EQ(hybrid->hybrid_forward()->stats().replays, 2);
  }
}

TEST(HybridizeTest, HybridizedModuleTrainsLikeEager) {
  auto run = [](bool hybridized) {
    manual_seed(42);
    auto model = make_cnn();
    if (hybridized) model->hybridize();
    optim::Adam opt(model->parameters(), optim::AdamOptions{.lr = 1e-2});
    std::vector<double> losses;
    manual_seed(7);
    for (int i = 0; i < 5; ++i) {
      Tensor x = randn({4, 1, 8, 8});
      Tensor y = Tensor::from_vector<int64_t>({i % 10, 3, 2, 5}, {4});
      opt.zero_grad();
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item<float>());
    }
    return losses;
  };
  std::vector<double> eager = run(false), hybrid = run(true);
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_NEAR(hybrid[i], eager[i], 1e-4 * std::abs(eager[i]));
}

}  // namespace
}  // namespace tandem
