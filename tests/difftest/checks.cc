#include "tests/difftest/checks.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "eager/optim/optim.h"
#include "serialization/model.h"
#include "serialization/npy.h"
#include "serialization/params.h"
#include "trace/executor.h"
#include "trace/passes/pipeline.h"

namespace tandem::difftest {
namespace {

namespace fs = std::filesystem;

// Note [Judging an answer]
// Every mode computes in float32, and may round differently from eager
// where it fuses (a oneDNN post-op, a batch norm folded into a layer's
// weights), so a mode's answer and eager's agree to a few float32 ulps of the
// largest terms, not bit for bit: the first test below. But a model can be
// ill-conditioned (a batch norm over two nearly equal values, a layer norm of
// two features), and then it amplifies rounding far beyond any fixed
// tolerance, in eager as much as in the graph. So an answer also passes when
// it is about as close to the exact answer — the float64 model's, with the
// float32 model's weights (model_spec.h) — as eager's is: within
// kErrorRatio times eager's largest error, plus a floor. A wrong answer (a
// bad fold, a lost update, a misplaced seed) misses both by orders of
// magnitude.
struct Tolerance {
  double rtol = 2e-4;
  double atol = 2e-5;
};
constexpr double kErrorRatio = 8;
constexpr double kErrorFloor = 1e-6;  // Relative to the tensor's largest exact value.

std::vector<double> values_of(const Tensor& t) {
  return cast(t, DType::kFloat64).to_vector<double>();
}

double largest_finite(const std::vector<double>& v) {
  double scale = 0;
  for (double x : v) scale = std::isfinite(x) ? std::max(scale, std::abs(x)) : scale;
  return scale;
}

// The largest difference, NaN matching NaN (and differing from a number).
double largest_error(const std::vector<double>& a, const std::vector<double>& b) {
  double error = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    const double d = std::abs(a[i] - b[i]);
    error = std::isnan(d) ? INFINITY : std::max(error, d);
  }
  return error;
}

// Whether `got` (a mode's answer) passes against `eager` (eager float32's)
// and `exact` (the float64 model's); otherwise what differs, named `what`.
std::optional<std::string> judge(const Tensor& got, const Tensor& eager, const Tensor& exact,
                                 const std::string& what, Tolerance tolerance = {}) {
  if (got.defined() != eager.defined()) {
    return str_cat(what, ": defined in ", got.defined() ? "this mode" : "eager", " only");
  }
  if (!got.defined()) return std::nullopt;
  if (got.shape() != eager.shape() || got.dtype() != eager.dtype()) {
    return str_cat(what, ": ", dtype_name(got.dtype()), got.shape().to_string(), " vs eager ",
                   dtype_name(eager.dtype()), eager.shape().to_string());
  }
  const std::vector<double> a = values_of(got), b = values_of(eager);
  const double scale = largest_finite(b);
  size_t first = a.size();
  for (size_t i = 0; i < a.size() && first == a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    const double allowed = tolerance.atol + tolerance.rtol * std::max(std::abs(b[i]), scale);
    if (!(std::abs(a[i] - b[i]) <= allowed)) first = i;
  }
  if (first == a.size()) return std::nullopt;
  const std::vector<double> c = values_of(exact);
  const double eager_error = largest_error(b, c), error = largest_error(a, c);
  if (error <= kErrorRatio * eager_error + kErrorFloor * largest_finite(c)) return std::nullopt;
  return str_cat(what, " ", got.shape().to_string(), " differs at element ", first, ": ", a[first],
                 " vs ", b[first], " eager (", c[first], " exact); largest error ", error,
                 " vs eager's ", eager_error);
}

// The parameters and buffers of models built from one spec, pairwise.
std::optional<std::string> state_differs(const nn::Module& got, const nn::Module& eager,
                                         const nn::Module& exact, const std::string& when,
                                         Tolerance tolerance = {}) {
  const nn::StateDict a = got.state_dict(), b = eager.state_dict(), c = exact.state_dict();
  for (const auto& [name, tensor] : b) {
    if (auto d = judge(a.at(name), tensor, c.at(name), str_cat(when, " ", name), tolerance)) {
      return d;
    }
  }
  return std::nullopt;
}

std::optional<std::string> grads_differ(const nn::Module& got, const nn::Module& eager,
                                        const nn::Module& exact, const std::string& when) {
  const nn::NamedTensors a = got.named_parameters(), b = eager.named_parameters(),
                         c = exact.named_parameters();
  for (size_t i = 0; i < b.size(); ++i) {
    if (auto d = judge(a[i].second.grad(), b[i].second.grad(), c[i].second.grad(),
                       str_cat(when, " gradient of ", b[i].first))) {
      return d;
    }
  }
  return std::nullopt;
}

// The float64 model's input: the same values (tokens stay int64).
Tensor exact_input(const Tensor& x) {
  return x.dtype() == DType::kFloat32 ? cast(x, DType::kFloat64) : x;
}

// Seeds derived from the model's, one per use, so each draw is reproducible.
uint64_t seed_for(const ModelSpec& spec, uint64_t use) { return spec.seed * 1000003 + use; }

Tensor target_for(const ModelSpec& spec, const Shape& output, uint64_t use) {
  manual_seed(seed_for(spec, use));
  return randn(Dims(output.begin(), output.end()));
}

// The three models a check compares: eager float32, the mode under test
// (float32) and the exact reference (float64), built from one spec.
struct Models {
  explicit Models(const ModelSpec& spec)
      : eager(build(spec)), tested(build(spec)), exact(build(spec, DType::kFloat64)) {}
  void eval() {
    for (BuiltModel* m : {&eager, &tested, &exact}) m->model->eval();
  }
  BuiltModel eager, tested, exact;
};

// The passes' contract on graphs they made: optimizing again changes
// nothing (so it cannot change a value either).
std::optional<std::string> optimizing_again_changes(const trace::Graph& optimized,
                                                    const trace::OptimizeOptions& options,
                                                    const std::string& what) {
  trace::Graph again = optimized;
  trace::optimize(again, options);
  const std::string once = trace::to_text(optimized), twice = trace::to_text(again);
  if (once == twice) return std::nullopt;
  return str_cat("optimizing the ", what, " graph again changes it: once\n", once, "twice\n",
                 twice);
}

std::optional<std::string> check_inference(const ModelSpec& spec, const CheckOptions&) {
  Models m(spec);
  m.eval();
  m.tested.model->hybridize();
  NoGradGuard no_grad;
  int call = 0;
  for (int64_t batch : {spec.batch, spec.batch, spec.other_batch, spec.other_batch, spec.batch}) {
    Tensor x = model_input(spec, batch, seed_for(spec, 10 + call));
    if (auto d = judge((*m.tested.model)(x), m.eager.model->forward(x),
                       m.exact.model->forward(exact_input(x)),
                       str_cat("call ", call, " (batch ", batch, ") output"))) {
      return d;
    }
    ++call;
  }
  return optimizing_again_changes(m.tested.model->hybrid_forward()->last_executor()->graph(), {},
                                  "hybridized inference");
}

std::optional<std::string> check_training_forward(const ModelSpec& spec, const CheckOptions&) {
  Models m(spec);
  m.tested.model->hybridize();
  NoGradGuard no_grad;
  for (int call = 0; call < 3; ++call) {
    Tensor x = model_input(spec, spec.batch, seed_for(spec, 20 + call));
    // The same seeds for each, so that dropout draws the same masks.
    manual_seed(seed_for(spec, 30 + call));
    Tensor eager = m.eager.model->forward(x);
    manual_seed(seed_for(spec, 30 + call));
    Tensor got = (*m.tested.model)(x);
    manual_seed(seed_for(spec, 30 + call));
    Tensor exact = m.exact.model->forward(exact_input(x));
    const std::string when = str_cat("call ", call);
    if (auto d = judge(got, eager, exact, when + " output")) return d;
    if (auto d = state_differs(*m.tested.model, *m.eager.model, *m.exact.model, "after " + when)) {
      return d;
    }
  }
  return std::nullopt;
}

std::optional<std::string> check_gradients(const ModelSpec& spec, const CheckOptions&) {
  Models m(spec);
  m.tested.model->hybridize();
  for (int call = 0; call < 2; ++call) {
    const Tensor x = model_input(spec, spec.batch, seed_for(spec, 40 + call));
    const Tensor target = target_for(spec, m.eager.output, 50 + call);
    // Per model: its input (a leaf that requires grad, for float input) and
    // its loss.
    auto loss_of = [&](BuiltModel& model, bool hybridized, Tensor& input) {
      input = model.model == m.exact.model ? exact_input(x) : x.snapshot();
      if (!spec.tokens) input = input.detach().requires_grad_();
      model.model->zero_grad();
      manual_seed(seed_for(spec, 60 + call));
      Tensor y = hybridized ? (*model.model)(input) : model.model->forward(input);
      return mse_loss(y, y.dtype() == target.dtype() ? target : cast(target, y.dtype()));
    };
    Tensor x_eager, x_tested, x_exact;
    loss_of(m.eager, false, x_eager).backward();
    loss_of(m.tested, true, x_tested).backward();
    loss_of(m.exact, false, x_exact).backward();
    const std::string when = str_cat("call ", call);
    if (auto d = grads_differ(*m.tested.model, *m.eager.model, *m.exact.model, when)) return d;
    if (!spec.tokens) {
      if (auto d =
              judge(x_tested.grad(), x_eager.grad(), x_exact.grad(), when + " input gradient")) {
        return d;
      }
    }
    if (auto d = state_differs(*m.tested.model, *m.eager.model, *m.exact.model, "after " + when)) {
      return d;
    }
  }
  return std::nullopt;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::optional<std::string> check_training(const ModelSpec& spec, const CheckOptions& options,
                                          const MakeOptimizer& make_optimizer) {
  Models m(spec);
  if (m.eager.model->parameters().empty()) return std::nullopt;  // Nothing to train.
  std::unique_ptr<optim::Optimizer> eager_opt = make_optimizer(m.eager.model->parameters());
  std::unique_ptr<optim::Optimizer> tested_opt = make_optimizer(m.tested.model->parameters());
  std::unique_ptr<optim::Optimizer> exact_opt = make_optimizer(m.exact.model->parameters());
  auto step = [](nn::Module& model, optim::Optimizer& opt, const std::vector<Tensor>& batch) {
    opt.zero_grad();
    Tensor loss = mse_loss(model.forward(batch[0]), batch[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  };
  HybridFunction hybrid_step(
      [&](const std::vector<Tensor>& batch) { return step(*m.tested.model, *tested_opt, batch); },
      {.warn_after_traces = 0, .name = "difftest_step"});
  // Training moves the weights by a few learning rates, so the tolerance is
  // wider than for one call.
  const Tolerance tolerance{.rtol = 1e-3, .atol = 1e-4};
  for (int s = 0; s < options.training_steps; ++s) {
    Tensor x = model_input(spec, spec.batch, seed_for(spec, 70 + s));
    Tensor target = target_for(spec, m.eager.output, 80 + s);
    manual_seed(seed_for(spec, 90 + s));
    Tensor eager = step(*m.eager.model, *eager_opt, {x, target})[0];
    manual_seed(seed_for(spec, 90 + s));
    Tensor got = hybrid_step({x, target})[0];
    manual_seed(seed_for(spec, 90 + s));
    Tensor exact =
        step(*m.exact.model, *exact_opt, {exact_input(x), cast(target, DType::kFloat64)})[0];
    const std::string when = str_cat("step ", s);
    if (auto d = judge(got, eager, exact, when + " loss", tolerance)) return d;
    if (auto d = state_differs(*m.tested.model, *m.eager.model, *m.exact.model, "after " + when,
                               tolerance)) {
      return d;
    }
  }
  if (hybrid_step.stats().traces != 1) {
    return str_cat("the training step traced ", hybrid_step.stats().traces,
                   " times for one signature");
  }
  return optimizing_again_changes(hybrid_step.last_executor()->graph(), {}, "training step");
}

std::optional<std::string> check_train_sgd(const ModelSpec& spec, const CheckOptions& options) {
  return check_training(spec, options, [](std::vector<Tensor> params) {
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  });
}

std::optional<std::string> check_train_adam(const ModelSpec& spec, const CheckOptions& options) {
  // A large eps: Adam divides by sqrt(v) + eps, which for a gradient that is
  // zero up to rounding turns rounding into a full-size step.
  return check_training(spec, options, [](std::vector<Tensor> params) {
    return std::make_unique<optim::Adam>(std::move(params),
                                         optim::AdamOptions{.lr = 0.01, .eps = 1e-3});
  });
}

// The files of an export, removed when it goes out of scope.
class ScratchModel {
 public:
  ScratchModel(const CheckOptions& options, const ModelSpec& spec)
      : dir_(fs::path(options.scratch_dir) / str_cat("difftest-", spec.seed, "-", ::getpid())) {
    fs::create_directories(dir_);
  }
  ~ScratchModel() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string path() const { return (dir_ / "model").string(); }

 private:
  fs::path dir_;
};

// The model of `spec` in eval mode, hybridized, called once at the traced
// batch size and exported to `files`.
LoadedModel export_and_load(const ModelSpec& spec, const BuiltModel& model,
                            const ScratchModel& files) {
  model.model->eval();
  {
    NoGradGuard no_grad;
    model.model->hybridize();
    (*model.model)(model_input(spec, spec.batch, seed_for(spec, 100)));
  }
  model.model->export_model(files.path());
  return load(files.path());
}

std::optional<std::string> check_export(const ModelSpec& spec, const CheckOptions& options) {
  Models m(spec);
  m.eval();
  ScratchModel files(options, spec);
  LoadedModel loaded = export_and_load(spec, m.tested, files);
  NoGradGuard no_grad;
  int call = 0;
  for (int64_t batch : {spec.batch, spec.other_batch, spec.batch}) {
    Tensor x = model_input(spec, batch, seed_for(spec, 110 + call));
    std::vector<Tensor> got = loaded.run({x});
    if (got.size() != 1) return str_cat("the loaded model returned ", got.size(), " outputs");
    if (auto d = judge(got[0], m.eager.model->forward(x), m.exact.model->forward(exact_input(x)),
                       str_cat("loaded model, call ", call, " (batch ", batch, ") output"))) {
      return d;
    }
    ++call;
  }
  return std::nullopt;
}

std::optional<std::string> check_reoptimize(const ModelSpec& spec, const CheckOptions& options) {
  Models m(spec);
  m.eval();
  ScratchModel files(options, spec);
  LoadedModel loaded = export_and_load(spec, m.tested, files);
  const serialization::GraphFile& file = loaded.file();
  const serialization::ParamsFile params = serialization::read_params(
      (fs::path(files.path()).parent_path() / file.params_file).string());
  NoGradGuard no_grad;
  const Tensor x = model_input(spec, spec.batch, seed_for(spec, 120));
  const Tensor eager = m.eager.model->forward(x);
  const Tensor exact = m.exact.model->forward(exact_input(x));

  // The graph as exported, its parameters passed as inputs...
  std::vector<Tensor> inputs{x};
  for (const serialization::NamedTensor& t : params.tensors) inputs.push_back(t.tensor);
  if (auto d = judge(trace::Executor(file.graph).run(inputs)[0], eager, exact,
                     "exported graph, output")) {
    return d;
  }
  // ... optimized once more as a training graph (parameters still inputs),
  trace::Graph again = file.graph;
  trace::optimize(again);
  if (auto d = judge(trace::Executor(again).run(inputs)[0], eager, exact,
                     "exported graph optimized again, output")) {
    return d;
  }
  // ... and for inference with them as constants, as a loader does, once
  // and then a second time, which must change nothing.
  trace::Graph constant = file.graph;
  size_t next = 0;
  for (trace::GraphInput& input : constant.inputs) {
    if (input.kind == trace::InputKind::kData) continue;
    input.kind = trace::InputKind::kConstant;
    input.constant = params.tensors[next++].tensor;
  }
  trace::optimize(constant, {.inference = true});
  if (auto d = judge(trace::Executor(constant).run({x})[0], eager, exact,
                     "exported graph optimized for inference, output")) {
    return d;
  }
  return optimizing_again_changes(constant, {.inference = true}, "loaded");
}

// Starting a process costs more than every other check of a model together,
// so one model in this many is also run by tandem-run.
constexpr uint64_t kOneInOtherProcess = 8;

std::optional<std::string> check_other_process(const ModelSpec& spec, const CheckOptions& options) {
  if (spec.seed % kOneInOtherProcess != 0) return std::nullopt;
  Models m(spec);
  m.eval();
  ScratchModel files(options, spec);
  LoadedModel loaded = export_and_load(spec, m.tested, files);
  const fs::path dir = fs::path(files.path()).parent_path();
  NoGradGuard no_grad;
  const Tensor x = model_input(spec, spec.other_batch, seed_for(spec, 130));
  serialization::write_npy((dir / "x.npy").string(), x);
  const std::string command =
      str_cat(TANDEM_RUN_PATH, " '", files.path(), ".json' --input '", (dir / "x.npy").string(),
              "' --output '", (dir / "out").string(), "' > '", (dir / "log").string(), "' 2>&1");
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(dir / "log");
    return str_cat("tandem-run failed: ", std::string(std::istreambuf_iterator<char>(log), {}));
  }
  const Tensor got =
      serialization::read_npy((dir / "out" / (loaded.outputs()[0].name + ".npy")).string());
  return judge(got, m.eager.model->forward(x), m.exact.model->forward(exact_input(x)),
               str_cat("tandem-run (batch ", spec.other_batch, ") output"));
}

using Check = std::optional<std::string> (*)(const ModelSpec&, const CheckOptions&);

const std::vector<std::pair<std::string, Check>>& checks() {
  static const auto* all = new std::vector<std::pair<std::string, Check>>{
      {"inference", check_inference},   {"training_forward", check_training_forward},
      {"gradients", check_gradients},   {"train_sgd", check_train_sgd},
      {"train_adam", check_train_adam}, {"export", check_export},
      {"reoptimize", check_reoptimize}, {"other_process", check_other_process},
  };
  return *all;
}

}  // namespace

const std::vector<std::string>& check_names() {
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    for (const auto& [name, check] : checks()) out->push_back(name);
    return out;
  }();
  return *names;
}

std::optional<Mismatch> run_check(const std::string& name, const ModelSpec& spec,
                                  const CheckOptions& options) {
  for (const auto& [check_name, check] : checks()) {
    if (check_name != name) continue;
    try {
      std::optional<std::string> detail = check(spec, options);
      if (detail) return Mismatch{name, *detail};
      return std::nullopt;
    } catch (const std::exception& e) {
      return Mismatch{name, str_cat("threw: ", e.what())};
    }
  }
  TANDEM_INTERNAL_ASSERT(false, "no check named '", name, "'");
}

std::optional<Mismatch> run_checks(const ModelSpec& spec, const CheckOptions& options) {
  for (const std::string& name : check_names()) {
    if (std::optional<Mismatch> m = run_check(name, spec, options)) return m;
  }
  return std::nullopt;
}

}  // namespace tandem::difftest
