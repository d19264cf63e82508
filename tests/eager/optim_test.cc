// Optimizers and learning-rate schedules: a few steps on a tiny problem
// against PyTorch's update rules computed here in double, the errors, and two
// end-to-end fits (a line, and a small MLP classifier).
#include "eager/optim/optim.h"

#include <cmath>
#include <functional>
#include <memory>
#include <numbers>
#include <set>
#include <source_location>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "core/tensor_observer.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

// The tiny problem: loss = sum(c * p^2), so grad = 2 c p, for a float64
// parameter starting at p0.
const std::vector<double> kP0 = {1.0, -2.0, 0.5};
const std::vector<double> kC = {0.5, 2.0, -1.0};

Tensor make_param() {
  Tensor p = Tensor::from_vector<double>(kP0, {3});
  p.requires_grad_();
  return p;
}

void compute_grad(const Tensor& p) {
  Tensor loss = sum(mul(Tensor::from_vector<double>(kC, {3}), mul(p, p)));
  loss.backward();
}

std::vector<double> reference_grad(const std::vector<double>& p) {
  std::vector<double> g(p.size());
  for (size_t i = 0; i < p.size(); ++i) g[i] = 2 * kC[i] * p[i];
  return g;
}

// Runs `steps` optimizer steps on the tiny problem and compares the
// parameter after each with `reference`, which updates p (in double) from
// its gradient g.
void check_steps(
    optim::Optimizer& opt, const Tensor& p,
    const std::function<void(std::vector<double>&, const std::vector<double>&)>& reference,
    int steps = 3) {
  std::vector<double> expected = kP0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    compute_grad(p);
    opt.step();
    reference(expected, reference_grad(expected));
    auto actual = p.to_vector<double>();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(actual[i], expected[i], 1e-12) << "step " << step + 1 << ", element " << i;
    }
  }
}

// The message of the tandem::Error `f` throws ("" if none).
template <class F>
std::string error_of_optimizer(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Verifies plain SGD: p -= lr g.
TEST(OptimSgdTest, Plain) {
  Tensor p = make_param();
  optim::SGD opt({p}, 0.1);
  check_steps(opt, p, [](auto& x, const auto& g) {
    for (size_t i = 0; i < x.size(); ++i) x[i] -= 0.1 * g[i];
  });
}

// Verifies SGD with momentum, dampening and weight decay.
TEST(OptimSgdTest, MomentumDampeningWeightDecay) {
  Tensor p = make_param();
  optim::SGD opt({p}, {.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01});
  std::vector<double> buf;
  check_steps(
      opt, p,
      [&](auto& x, const auto& grad) {
        std::vector<double> g = grad;
        for (size_t i = 0; i < x.size(); ++i) g[i] += 0.01 * x[i];
        if (buf.empty()) {
          buf = g;
        } else {
          for (size_t i = 0; i < x.size(); ++i) buf[i] = 0.9 * buf[i] + 0.8 * g[i];
        }
        for (size_t i = 0; i < x.size(); ++i) x[i] -= 0.05 * buf[i];
      },
      4);
  EXPECT_TRUE(opt.momentum_buffer(0).defined());
}

// Verifies Note [SGD in two passes]: a float32 momentum step gives the same
// bits as the update written op by op.
TEST(OptimSgdTest, FusedMomentumStepIsTheOpByOpUpdateBitForBit) {
  Tensor p = Tensor::from_vector<float>({0.3f, -1.7f, 2.9f, 1e-3f, -4e4f}, {5});
  p.requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  std::vector<float> expected = p.to_vector<float>();
  Tensor buf = zeros({5}, DType::kFloat32);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    sum(mul(p, p)).backward();
    Tensor g = p.grad().detach();
    Tensor before = p.detach();
    opt.step();
    NoGradGuard no_grad;
    buf = add(mul(buf, 0.9), g);
    Tensor want = sub(before, mul(buf, full({}, 0.1, DType::kFloat32)));
    EXPECT_EQ(p.to_vector<float>(), want.to_vector<float>()) << "step " << step + 1;
    EXPECT_EQ(opt.momentum_buffer(0).to_vector<float>(), buf.to_vector<float>());
  }
}

// Verifies SGD with Nesterov momentum: g += momentum buf.
TEST(OptimSgdTest, Nesterov) {
  Tensor p = make_param();
  optim::SGD opt({p}, 0.1, /*momentum=*/0.5, /*dampening=*/0, /*weight_decay=*/0,
                 /*nesterov=*/true);
  std::vector<double> buf;
  check_steps(opt, p, [&](auto& x, const auto& g) {
    if (buf.empty()) {
      buf = g;
    } else {
      for (size_t i = 0; i < x.size(); ++i) buf[i] = 0.5 * buf[i] + g[i];
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] -= 0.1 * (g[i] + 0.5 * buf[i]);
  });
}

// The Adam / AdamW reference in double.
struct AdamReference {
  AdamReference(double lr, double beta1, double beta2, double eps, double weight_decay,
                bool decoupled, bool amsgrad = false)
      : lr(lr),
        beta1(beta1),
        beta2(beta2),
        eps(eps),
        weight_decay(weight_decay),
        decoupled(decoupled),
        amsgrad(amsgrad) {}
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad;
  std::vector<double> m, v, v_max;
  int t = 0;

  void operator()(std::vector<double>& x, const std::vector<double>& grad) {
    if (m.empty()) m = v = v_max = std::vector<double>(x.size(), 0);
    ++t;
    for (size_t i = 0; i < x.size(); ++i) {
      double g = grad[i];
      if (decoupled) {
        x[i] *= 1 - lr * weight_decay;
      } else {
        g += weight_decay * x[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      v_max[i] = std::max(v_max[i], v[i]);
      const double vv = amsgrad ? v_max[i] : v[i];
      const double denom = std::sqrt(vv) / std::sqrt(1 - std::pow(beta2, t)) + eps;
      x[i] -= lr / (1 - std::pow(beta1, t)) * m[i] / denom;
    }
  }
};

// Verifies Adam with defaults, and with L2 weight decay.
TEST(OptimAdamTest, MatchesReference) {
  Tensor p = make_param();
  optim::Adam opt({p});
  check_steps(opt, p, AdamReference{1e-3, 0.9, 0.999, 1e-8, 0, false});
  EXPECT_EQ(opt.step_count(0), 3);

  Tensor q = make_param();
  optim::Adam decayed({q}, {.lr = 0.1, .betas = {0.8, 0.9}, .eps = 1e-6, .weight_decay = 0.1});
  check_steps(decayed, q, AdamReference{0.1, 0.8, 0.9, 1e-6, 0.1, false});
}

// Verifies AdamW's decoupled weight decay (default 1e-2) and amsgrad.
TEST(OptimAdamTest, AdamWAndAmsgrad) {
  Tensor p = make_param();
  optim::AdamW opt({p}, {.lr = 0.1});
  EXPECT_EQ(opt.options().weight_decay, 1e-2);
  check_steps(opt, p, AdamReference{0.1, 0.9, 0.999, 1e-8, 1e-2, true});

  Tensor q = make_param();
  optim::Adam ams({q}, {.lr = 0.3, .amsgrad = true});
  AdamReference reference{0.3, 0.9, 0.999, 1e-8, 0, false, true};
  check_steps(ams, q, reference, 5);
}

// torch.optim.RMSprop's rule, in double.
struct RMSpropReference {
  optim::RMSpropOptions o;
  std::vector<double> square = {}, grad_avg = {}, buf = {};
  void operator()(std::vector<double>& x, const std::vector<double>& grad) {
    if (square.empty()) square = grad_avg = buf = std::vector<double>(x.size(), 0);
    for (size_t i = 0; i < x.size(); ++i) {
      const double g = grad[i] + o.weight_decay * x[i];
      square[i] = o.alpha * square[i] + (1 - o.alpha) * g * g;
      double avg = square[i];
      if (o.centered) {
        grad_avg[i] = o.alpha * grad_avg[i] + (1 - o.alpha) * g;
        avg -= grad_avg[i] * grad_avg[i];
      }
      avg = std::sqrt(avg) + o.eps;
      if (o.momentum > 0) {
        buf[i] = o.momentum * buf[i] + g / avg;
        x[i] -= o.lr * buf[i];
      } else {
        x[i] -= o.lr * g / avg;
      }
    }
  }
};

TEST(OptimRMSpropTest, MatchesReference) {
  for (const optim::RMSpropOptions& options :
       {optim::RMSpropOptions{}, optim::RMSpropOptions{.lr = 0.05, .weight_decay = 0.1},
        optim::RMSpropOptions{.lr = 0.05, .alpha = 0.9, .momentum = 0.8},
        optim::RMSpropOptions{.lr = 0.02, .eps = 1e-6, .momentum = 0.5, .centered = true},
        optim::RMSpropOptions{.lr = 0.02, .centered = true}}) {
    SCOPED_TRACE(str_cat("momentum ", options.momentum, " centered ", options.centered));
    Tensor p = make_param();
    optim::RMSprop opt({p}, options);
    check_steps(opt, p, RMSpropReference{options}, 4);
  }
  Tensor p = make_param();
  EXPECT_THAT(error_of_optimizer([&] { optim::RMSprop({p}, {.alpha = 1.0}); }),
              HasSubstr("alpha must be in [0, 1)"));
}

TEST(OptimAdagradTest, MatchesReference) {
  const optim::AdagradOptions options{
      .lr = 0.1, .lr_decay = 0.5, .weight_decay = 0.05, .initial_accumulator_value = 0.2};
  Tensor p = make_param();
  optim::Adagrad opt({p}, options);
  std::vector<double> sum(3, options.initial_accumulator_value);
  int t = 0;
  check_steps(
      opt, p,
      [&](std::vector<double>& x, const std::vector<double>& grad) {
        ++t;
        const double clr = options.lr / (1 + (t - 1) * options.lr_decay);
        for (size_t i = 0; i < x.size(); ++i) {
          const double g = grad[i] + options.weight_decay * x[i];
          sum[i] += g * g;
          x[i] -= clr * g / (std::sqrt(sum[i]) + options.eps);
        }
      },
      4);
  EXPECT_THAT(error_of_optimizer([&] { optim::Adagrad({p}, {.lr_decay = -1}); }),
              HasSubstr("must be >= 0"));
}

// Verifies that a float32 parameter follows the float64 reference closely.
TEST(OptimAdamTest, Float32Parameter) {
  Tensor p = Tensor::from_vector<float>({1.0f, -2.0f, 0.5f}, {3});
  p.requires_grad_();
  optim::Adam opt({p}, {.lr = 0.1});
  AdamReference reference{0.1, 0.9, 0.999, 1e-8, 0, false};
  std::vector<double> expected = kP0;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    sum(mul(Tensor::from_vector<float>({0.5f, 2.0f, -1.0f}, {3}), mul(p, p))).backward();
    opt.step();
    reference(expected, reference_grad(expected));
  }
  auto actual = p.to_vector<float>();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(actual[i], expected[i], 1e-5);
}

// Verifies that parameters without a gradient are skipped: unchanged, and
// their state does not advance.
TEST(OptimTest, SkipsParametersWithoutGrad) {
  Tensor used = make_param();
  Tensor unused = make_param();
  optim::Adam opt({used, unused});
  compute_grad(used);
  opt.step();
  EXPECT_EQ(unused.to_vector<double>(), kP0);
  EXPECT_EQ(opt.step_count(0), 1);
  EXPECT_EQ(opt.step_count(1), 0);
  EXPECT_EQ(opt.exp_avg(1).to_vector<double>(), std::vector<double>(3, 0.0));
  opt.zero_grad();
  EXPECT_FALSE(used.grad().defined());
  opt.step();  // No gradients at all: nothing happens.
  EXPECT_EQ(opt.step_count(0), 1);
}

// Verifies that the module's own handle sees the optimizer's update.
TEST(OptimTest, UpdatesAreSeenByTheModule) {
  nn::Linear fc(2, 1);
  const auto before = fc.weight().to_vector<float>();
  optim::SGD opt(fc.parameters(), 1.0);
  sum(fc.forward(ones({1, 2}))).backward();  // d/dw = 1 for each weight.
  opt.step();
  const auto after = fc.weight().to_vector<float>();
  EXPECT_FLOAT_EQ(after[0], before[0] - 1);
  EXPECT_FLOAT_EQ(after[1], before[1] - 1);
  EXPECT_TRUE(fc.weight().requires_grad());
}

// Verifies the option checks.
TEST(OptimTest, Errors) {
  Tensor p = make_param();
  auto expect_error = [](auto&& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "expected an error containing " << part;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(part));
    }
  };
  expect_error([&] { optim::SGD({p}, -1.0); }, "learning rate must be >= 0, got -1");
  expect_error([&] { optim::SGD({p}, {.lr = 0.1, .nesterov = true}); }, "nesterov");
  expect_error([&] { optim::SGD({p}, {.lr = 0.1, .momentum = -1}); }, "momentum");
  expect_error([&] { optim::Adam({p}, {.betas = {0.9, 1.0}}); }, "betas must be in [0, 1)");
  expect_error([&] { optim::AdamW({p}, {.weight_decay = -1}); }, "AdamW: weight_decay");
  expect_error([&] { optim::SGD({ones({2})}, 0.1); }, "does not require grad");
  expect_error([&] { optim::SGD({Tensor()}, 0.1); }, "undefined");
  optim::SGD opt({p}, 0.1);
  expect_error([&] { opt.set_lr(-0.5); }, "learning rate");
  expect_error([&] { optim::StepLR(opt, 0); }, "step_size must be > 0");
  expect_error([&] { optim::CosineAnnealingLR(opt, 0); }, "T_max must be > 0");
}

// Verifies that a parameter listed twice is refused rather than stepped twice
// per step() (which SGD would do, moving it by twice the learning rate).
TEST(OptimTest, RefusesAParameterListedTwice) {
  Tensor p = make_param();
  Tensor q = make_param();
  try {
    optim::SGD({p, q, p}, 0.1);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("optimizer parameters 0 and 2 are the same tensor"));
  }
  // A second handle on the same tensor is the same parameter too.
  Tensor alias = p;
  EXPECT_THROW(optim::Adam({p, alias}), Error);
}

// Verifies StepLR and CosineAnnealingLR against their formulas.
TEST(OptimScheduleTest, StepAndCosine) {
  Tensor p = make_param();
  optim::SGD opt({p}, 0.1);
  optim::StepLR step_lr(opt, 3, 0.5);
  const double expected_step[] = {0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025};
  for (double lr : expected_step) {
    step_lr.step();
    EXPECT_DOUBLE_EQ(opt.lr(), lr) << "epoch " << step_lr.epoch();
  }

  optim::Adam adam({p}, {.lr = 1.0});
  optim::CosineAnnealingLR cosine(adam, 4, 0.2);
  EXPECT_DOUBLE_EQ(cosine.lr_at(0), 1.0);
  for (int epoch = 1; epoch <= 6; ++epoch) {
    cosine.step();
    const double expected = 0.2 + 0.8 * (1 + std::cos(std::numbers::pi * epoch / 4)) / 2;
    EXPECT_NEAR(adam.lr(), expected, 1e-15) << "epoch " << epoch;
  }
  EXPECT_DOUBLE_EQ(cosine.lr_at(4), 0.2);
}

TEST(OptimScheduleTest, LambdaWarmupCosineAndOneCycle) {
  Tensor p = make_param();
  optim::SGD opt({p}, 0.5);
  optim::LambdaLR lambda(opt, [](int64_t epoch) { return 1.0 / (1 + epoch); });
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
  lambda.step();
  lambda.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5 / 3);

  optim::SGD warm_opt({p}, 1.0);
  optim::WarmupCosineLR warm(warm_opt, /*warmup_steps=*/4, /*total_steps=*/12, 0.1);
  EXPECT_DOUBLE_EQ(warm_opt.lr(), 0.0);  // Set when made: the first step's lr.
  const double expected[] = {0.25, 0.5, 0.75, 1.0};
  for (double lr : expected) {
    warm.step();
    EXPECT_DOUBLE_EQ(warm_opt.lr(), lr) << "epoch " << warm.epoch();
  }
  EXPECT_NEAR(warm.lr_at(8), 0.1 + 0.9 * (1 + std::cos(std::numbers::pi * 0.5)) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(warm.lr_at(12), 0.1);
  EXPECT_DOUBLE_EQ(warm.lr_at(20), 0.1);

  // torch.optim.lr_scheduler.OneCycleLR(max_lr=1, total_steps=10) gives
  // 0.04, 0.52, 1.0 for steps 0-2, then anneals to 4e-6 at step 9.
  optim::SGD cycle_opt({p}, 123.0);
  optim::OneCycleLR cycle(cycle_opt, {.max_lr = 1.0, .total_steps = 10});
  EXPECT_NEAR(cycle_opt.lr(), 0.04, 1e-15);
  EXPECT_NEAR(cycle.lr_at(1), 0.52, 1e-15);
  EXPECT_DOUBLE_EQ(cycle.lr_at(2), 1.0);
  EXPECT_NEAR(cycle.lr_at(9), 4e-6, 1e-18);
  EXPECT_NEAR(cycle.lr_at(5), 4e-6 + (1 - 4e-6) * (1 + std::cos(std::numbers::pi * 3 / 7)) / 2,
              1e-15);
  EXPECT_THAT(error_of_optimizer([&] { cycle.lr_at(11); }),
              HasSubstr("stepped 11 times, but total_steps is 10"));
  EXPECT_THAT(error_of_optimizer([&] { optim::WarmupCosineLR(opt, 5, 5); }),
              HasSubstr("0 <= warmup_steps < total_steps"));
}

// Verifies clip_grad_norm_: the total norm over all gradients, scaling only
// when it exceeds max_norm, and separate results for grads that share a handle.
TEST(OptimClipTest, ClipGradNorm) {
  Tensor a = Tensor::from_vector<double>({3, 0}, {2}).requires_grad_();
  Tensor b = Tensor::from_vector<double>({0, 0}, {2}).requires_grad_();
  Tensor unused = Tensor::from_vector<double>({1}, {1}).requires_grad_();
  // d/da = d/db = {3, 4}: the two grads may be one handle.
  sum(mul(add(a, b), Tensor::from_vector<double>({3, 4}, {2}))).backward();
  Tensor total = optim::clip_grad_norm_({a, b, unused}, 1.0);
  EXPECT_NEAR(total.item<double>(), std::sqrt(50.0), 1e-12);
  const double scale = 1.0 / (std::sqrt(50.0) + 1e-6);
  for (const Tensor& p : {a, b}) {
    auto g = p.grad().to_vector<double>();
    EXPECT_NEAR(g[0], 3 * scale, 1e-12);
    EXPECT_NEAR(g[1], 4 * scale, 1e-12);
  }
  EXPECT_FALSE(unused.grad().defined());
  // Below max_norm: unchanged.
  Tensor small = optim::clip_grad_norm_({a}, 10.0);
  EXPECT_NEAR(a.grad().to_vector<double>()[1], 4 * scale, 1e-12);
  EXPECT_NEAR(small.item<double>(), 5 * scale, 1e-12);
  EXPECT_FALSE(optim::clip_grad_norm_({unused}, 1.0).defined());
}

// ---- Replayable steps: Note [Why optimizer state is tensors updated in place]. ----

// What a tracer sees of tensors besides ops: which TensorImpls assign_ rebinds,
// and any value read on the host.
class RecordingObserver : public TensorObserver {
 public:
  void on_value_read(const Tensor&, const char* what, const std::source_location&) override {
    reads.push_back(what);
  }
  void on_assign(const Tensor& target, const Tensor&) override {
    assigned.insert(target.impl_ptr().get());
  }
  std::vector<std::string> reads;
  std::set<const TensorImpl*> assigned;
};

// A handle held by an optimizer, and what it referred to when captured.
struct Captured {
  std::string name;
  std::function<Tensor()> get;  // Reads the optimizer's handle now.
  std::shared_ptr<TensorImpl> impl;
  std::shared_ptr<Storage> storage;
};

Captured capture(std::string name, std::function<Tensor()> get) {
  Tensor t = get();
  EXPECT_TRUE(t.defined()) << name << " is not created by the constructor";
  if (!t.defined()) return {std::move(name), std::move(get), nullptr, nullptr};
  return {std::move(name), std::move(get), t.impl_ptr(), t.storage()};
}

// Checks the tracer's view of `handles` across `step` (run twice): each
// handle is still the TensorImpl it was (a replay reads state by handle),
// each new value came through assign_ (which a replay repeats), every one of
// them got a new value, and nothing was read on the host.
void check_rebound_in_place(std::vector<Captured> handles, const std::function<void()>& step) {
  for (int n = 1; n <= 2; ++n) {
    RecordingObserver observer;
    {
      TensorObserverScope scope(&observer);
      step();
    }
    EXPECT_THAT(observer.reads, ::testing::IsEmpty()) << "step " << n;
    for (Captured& h : handles) {
      Tensor now = h.get();
      EXPECT_EQ(now.impl_ptr(), h.impl) << h.name << " got a new handle on step " << n;
      EXPECT_NE(now.storage(), h.storage) << h.name << " did not change on step " << n;
      EXPECT_TRUE(observer.assigned.contains(now.impl_ptr().get()))
          << h.name << " was not rebound with assign_ on step " << n;
      h.storage = now.storage();
    }
  }
}

// A float64 and a float32 parameter, so that each dtype has its lr tensor.
struct TwoDtypes {
  Tensor p64 = make_param();
  Tensor p32 = Tensor::from_vector<float>({1.0f, -2.0f}, {2}).requires_grad_();
  void backward() const {
    compute_grad(p64);
    sum(mul(p32, p32)).backward();
  }
};

// Verifies that SGD's and Adam's steps rebind every piece of state (the
// parameters, momentum buffers, moments, step counts) with assign_, that the
// state exists before the first step, and that a step (with clipping before
// it) reads no value on the host.
TEST(OptimReplayTest, StepRebindsStateInPlace) {
  for (const optim::SGDOptions& options :
       {optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
        optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}}) {
    TwoDtypes ps;
    optim::SGD opt({ps.p64, ps.p32}, options);
    std::vector<Captured> handles;
    for (size_t i = 0; i < 2; ++i) {
      handles.push_back(capture(str_cat("param ", i), [&, i] { return opt.params()[i]; }));
      handles.push_back(
          capture(str_cat("momentum_buffer ", i), [&, i] { return opt.momentum_buffer(i); }));
    }
    check_rebound_in_place(handles, [&] {
      opt.zero_grad();
      ps.backward();
      optim::clip_grad_norm_(opt.params(), 1.0);
      opt.step();
    });
  }
  for (bool adamw : {false, true}) {
    TwoDtypes ps;
    std::unique_ptr<optim::Adam> opt =
        adamw ? std::make_unique<optim::AdamW>(std::vector<Tensor>{ps.p64, ps.p32})
              : std::make_unique<optim::Adam>(
                    std::vector<Tensor>{ps.p64, ps.p32},
                    optim::AdamOptions{.weight_decay = 0.1, .amsgrad = true});
    std::vector<Captured> handles;
    for (size_t i = 0; i < 2; ++i) {
      handles.push_back(capture(str_cat("param ", i), [&, i] { return opt->params()[i]; }));
      handles.push_back(capture(str_cat("exp_avg ", i), [&, i] { return opt->exp_avg(i); }));
      handles.push_back(capture(str_cat("exp_avg_sq ", i), [&, i] { return opt->exp_avg_sq(i); }));
      if (!adamw) {
        handles.push_back(
            capture(str_cat("max_exp_avg_sq ", i), [&, i] { return opt->max_exp_avg_sq(i); }));
      }
    }
    // Both parameters are updated together: they share one step count.
    EXPECT_EQ(opt->step_count_tensor(0).impl_ptr(), opt->step_count_tensor(1).impl_ptr());
    handles.push_back(capture("step count", [&] { return opt->step_count_tensor(0); }));
    check_rebound_in_place(handles, [&] {
      opt->zero_grad();
      ps.backward();
      opt->step();
    });
    EXPECT_EQ(opt->step_count(0), 2);
  }
}

// RMSprop's and Adagrad's steps rebind their state in place too, and read
// nothing on the host.
TEST(OptimReplayTest, RMSpropAndAdagradRebindStateInPlace) {
  {
    TwoDtypes ps;
    optim::RMSprop opt({ps.p64, ps.p32}, {.momentum = 0.9, .centered = true});
    std::vector<Captured> handles;
    for (size_t i = 0; i < 2; ++i) {
      handles.push_back(capture(str_cat("param ", i), [&, i] { return opt.params()[i]; }));
      handles.push_back(capture(str_cat("square_avg ", i), [&, i] { return opt.square_avg(i); }));
      handles.push_back(capture(str_cat("grad_avg ", i), [&, i] { return opt.grad_avg(i); }));
      handles.push_back(
          capture(str_cat("momentum_buffer ", i), [&, i] { return opt.momentum_buffer(i); }));
    }
    check_rebound_in_place(handles, [&] {
      opt.zero_grad();
      ps.backward();
      opt.step();
    });
  }
  TwoDtypes ps;
  optim::Adagrad opt({ps.p64, ps.p32}, {.lr_decay = 0.1});
  std::vector<Captured> handles;
  for (size_t i = 0; i < 2; ++i) {
    handles.push_back(capture(str_cat("param ", i), [&, i] { return opt.params()[i]; }));
    handles.push_back(capture(str_cat("sum ", i), [&, i] { return opt.sum(i); }));
  }
  check_rebound_in_place(handles, [&] {
    opt.zero_grad();
    ps.backward();
    opt.step();
  });
}

// A hybridized training step with RMSprop or Adagrad gives the eager
// parameters, step after step (the replays included).
TEST(OptimReplayTest, HybridizedRMSpropAndAdagradMatchEager) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"RMSprop",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::RMSprop>(
             std::move(ps), optim::RMSpropOptions{.lr = 0.01, .momentum = 0.9, .centered = true});
       }},
      {"Adagrad", [](std::vector<Tensor> ps) {
         return std::make_unique<optim::Adagrad>(std::move(ps),
                                                 optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.1});
       }}};
  for (const auto& [name, make] : makers) {
    SCOPED_TRACE(name);
    const auto build = [] {
      manual_seed(31);
      return std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
    };
    auto eager_net = build(), traced_net = build();
    auto eager_opt = make(eager_net->parameters()), traced_opt = make(traced_net->parameters());
    auto step = hybridize([&](const std::vector<Tensor>& in) {
      traced_opt->zero_grad();
      Tensor loss = cross_entropy(traced_net->forward(in[0]), in[1]);
      loss.backward();
      traced_opt->step();
      return std::vector<Tensor>{loss};
    });
    manual_seed(32);
    Tensor x = randn({5, 4});
    Tensor y = Tensor::from_vector<int64_t>({0, 2, 1, 1, 0}, {5});
    for (int i = 0; i < 4; ++i) {
      eager_opt->zero_grad();
      Tensor eager_loss = cross_entropy(eager_net->forward(x), y);
      eager_loss.backward();
      eager_opt->step();
      EXPECT_NEAR(step({x, y})[0].item<float>(), eager_loss.item<float>(), 1e-6) << "step " << i;
      const auto want = eager_net->parameters(), got = traced_net->parameters();
      for (size_t k = 0; k < want.size(); ++k) {
        const auto a = got[k].to_vector<float>(), b = want[k].to_vector<float>();
        for (size_t e = 0; e < a.size(); ++e) {
          ASSERT_NEAR(a[e], b[e], 1e-6) << "step " << i << ", parameter " << k << ", element " << e;
        }
      }
    }
    EXPECT_EQ(step.stats().replays, 3);
  }
}

// Verifies that set_lr rebinds each dtype's lr tensor in place (a replayed
// step reads it live) and reads nothing on the host.
TEST(OptimReplayTest, SetLrRebindsLrTensors) {
  TwoDtypes ps;
  optim::Adam opt({ps.p64, ps.p32}, {.lr = 0.5});
  EXPECT_EQ(opt.lr_tensor(DType::kFloat64).item<double>(), 0.5);
  EXPECT_EQ(opt.lr_tensor(DType::kFloat32).item<float>(), 0.5f);
  check_rebound_in_place({capture("lr float64", [&] { return opt.lr_tensor(DType::kFloat64); }),
                          capture("lr float32", [&] { return opt.lr_tensor(DType::kFloat32); })},
                         [&] { opt.set_lr(opt.lr() / 2); });
  EXPECT_EQ(opt.lr(), 0.125);
  EXPECT_EQ(opt.lr_tensor(DType::kFloat64).item<double>(), 0.125);
  EXPECT_EQ(opt.lr_tensor(DType::kFloat32).item<float>(), 0.125f);
  EXPECT_THROW(opt.lr_tensor(DType::kFloat16), Error);
}

// Runs one optimizer step per entry of `lrs`, setting the lr before each,
// and compares the float64 parameter with `reference`, which updates p (in
// double) from its gradient g and the step's lr.
void check_steps_with_lr(optim::Optimizer& opt, const Tensor& p, const std::vector<double>& lrs,
                         const std::function<void(std::vector<double>&, const std::vector<double>&,
                                                  double)>& reference) {
  std::vector<double> expected = kP0;
  for (size_t step = 0; step < lrs.size(); ++step) {
    opt.set_lr(lrs[step]);
    opt.zero_grad();
    compute_grad(p);
    opt.step();
    reference(expected, reference_grad(expected), lrs[step]);
    auto actual = p.to_vector<double>();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(actual[i], expected[i], 1e-12) << "step " << step + 1 << ", element " << i;
    }
  }
}

// Verifies three steps of Adam, AdamW and SGD with Nesterov momentum and
// weight decay against the references, with set_lr changing the lr between
// steps (as a schedule would between replays).
TEST(OptimReplayTest, SetLrBetweenStepsMatchesReference) {
  const std::vector<double> lrs = {0.1, 0.02, 0.3};
  for (bool adamw : {false, true}) {
    Tensor p = make_param();
    std::unique_ptr<optim::Adam> opt =
        adamw ? std::make_unique<optim::AdamW>(std::vector<Tensor>{p},
                                               optim::AdamWOptions{.weight_decay = 0.1})
              : std::make_unique<optim::Adam>(std::vector<Tensor>{p},
                                              optim::AdamOptions{.weight_decay = 0.1});
    AdamReference reference{0, 0.9, 0.999, 1e-8, 0.1, adamw};
    check_steps_with_lr(*opt, p, lrs, [&](auto& x, const auto& g, double lr) {
      reference.lr = lr;
      reference(x, g);
    });
  }
  Tensor p = make_param();
  optim::SGD sgd({p}, {.lr = 1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  std::vector<double> buf;
  check_steps_with_lr(sgd, p, lrs, [&](auto& x, const auto& grad, double lr) {
    std::vector<double> g = grad;
    for (size_t i = 0; i < x.size(); ++i) g[i] += 0.01 * x[i];
    if (buf.empty()) {
      buf = g;
    } else {
      for (size_t i = 0; i < x.size(); ++i) buf[i] = 0.9 * buf[i] + g[i];
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] -= lr * (g[i] + 0.9 * buf[i]);
  });
}

// Verifies that a parameter skipped by the first steps gets its own step
// count (Adam's bias correction and SGD's dampening both start over for it)
// while the other keeps counting.
TEST(OptimReplayTest, SkippedParameterStartsItsOwnCount) {
  Tensor a = make_param(), b = make_param();
  optim::Adam adam({a, b}, {.lr = 0.1});
  AdamReference ref_a{0.1, 0.9, 0.999, 1e-8, 0, false}, ref_b = ref_a;
  std::vector<double> expected_a = kP0, expected_b = kP0;
  for (int step = 1; step <= 3; ++step) {
    adam.zero_grad();
    compute_grad(a);
    ref_a(expected_a, reference_grad(expected_a));
    if (step == 3) {
      compute_grad(b);
      ref_b(expected_b, reference_grad(expected_b));
    }
    adam.step();
  }
  EXPECT_EQ(adam.step_count(0), 3);
  EXPECT_EQ(adam.step_count(1), 1);
  EXPECT_NE(adam.step_count_tensor(0).impl_ptr(), adam.step_count_tensor(1).impl_ptr());
  const auto actual_a = a.to_vector<double>(), actual_b = b.to_vector<double>();
  for (size_t i = 0; i < kP0.size(); ++i) {
    EXPECT_NEAR(actual_a[i], expected_a[i], 1e-12) << "element " << i;
    EXPECT_NEAR(actual_b[i], expected_b[i], 1e-12) << "element " << i;
  }

  // SGD with dampening: b's first update uses buf = g, not (1 - dampening) g.
  Tensor c = make_param(), d = make_param();
  optim::SGD sgd({c, d}, {.lr = 0.1, .momentum = 0.5, .dampening = 0.5});
  compute_grad(c);
  sgd.step();
  sgd.zero_grad();
  compute_grad(d);
  sgd.step();
  const auto actual_d = d.to_vector<double>();
  const auto g = reference_grad(kP0);
  for (size_t i = 0; i < kP0.size(); ++i) {
    EXPECT_NEAR(actual_d[i], kP0[i] - 0.1 * g[i], 1e-12) << "element " << i;
  }
}

// Verifies an end-to-end fit of y = 3x + 2 with Linear(1, 1), SGD and MSE.
TEST(OptimEndToEndTest, FitsALine) {
  manual_seed(3);
  nn::Linear model(1, 1);
  optim::SGD opt(model.parameters(), 0.1);
  Tensor x = sub(mul(rand({64, 1}), 2.0), 1.0);  // Uniform in [-1, 1).
  Tensor y = add(mul(x, 3.0), 2.0);
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    mse_loss(model.forward(x), y).backward();
    opt.step();
  }
  EXPECT_NEAR(model.weight().item<float>(), 3.0, 1e-2);
  EXPECT_NEAR(model.bias().item<float>(), 2.0, 1e-2);
}

// Verifies that a 2-layer MLP trained with Adam separates a small synthetic
// set (label: the point's quadrant parity, XOR-like) to > 95% train accuracy.
TEST(OptimEndToEndTest, MlpClassifies) {
  manual_seed(4);
  const int n = 256;
  Tensor x = sub(mul(rand({n, 2}), 2.0), 1.0);
  const auto xs = x.to_vector<float>();
  std::vector<int64_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (xs[2 * i] > 0) == (xs[2 * i + 1] > 0) ? 1 : 0;
  Tensor y = Tensor::from_vector<int64_t>(labels, {n});

  nn::Sequential mlp(nn::Linear(2, 32), nn::ReLU(), nn::Linear(32, 2));
  optim::Adam opt(mlp.parameters(), {.lr = 0.02});
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    cross_entropy(mlp.forward(x), y).backward();
    opt.step();
  }
  const auto predicted = argmax(mlp.forward(x), 1).to_vector<int64_t>();
  int correct = 0;
  for (int i = 0; i < n; ++i) correct += predicted[i] == labels[i];
  EXPECT_GT(correct, 0.95 * n) << correct << " of " << n;
}

}  // namespace
}  // namespace tandem
