#include "tests/difftest/checks.h"

#include <unistd.h>

#include <algorithm>
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
// A check is a procedure (call the model, train it, export it ...) that
// yields named tensors: outputs, gradients, state after each call. It runs
// on five models built from one spec (model_spec.h): eager float32, the mode
// under test (float32: hybridized, exported, ...), the exact float64 model,
// and two eager float32 models nudged by an ulp after every layer, which
// take other rounding paths (Note [Jitter] in model_spec.cc). The mode
// passes when each of its tensors
//   - is within a few float32 ulps of the largest eager value (the modes may
//     round differently where they fuse: a oneDNN post-op, a batch norm
//     folded into a layer's weights), or
//   - is about as close to the exact answer as float32 rounding gets on
//     this model: within kErrorRatio times the largest error of eager
//     float32 and of the jittered runs, plus a floor.
// The second test is for ill-conditioned models (a batch norm over nearly
// equal values, a layer norm of two features), which amplify rounding far
// beyond any fixed tolerance, in eager as much as anywhere; the jittered
// models measure that amplification rather than guess it. A wrong answer (a
// bad fold, a lost update, a misplaced seed) misses both by orders of
// magnitude.
struct Tolerance {
  double rtol = 2e-4;
  double atol = 2e-5;
};
constexpr double kErrorRatio = 8;
constexpr double kErrorFloor = 1e-6;  // Relative to the tensor's largest exact value.
constexpr int kJittered = 2;

// What one run of a check yields, in order.
using Results = std::vector<std::pair<std::string, Tensor>>;

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

// Whether `got` passes (Note [Judging an answer]); otherwise what differs.
std::optional<std::string> judge(const std::string& what, const Tensor& got, const Tensor& eager,
                                 const Tensor& exact, const std::vector<Tensor>& jittered,
                                 Tolerance tolerance) {
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
  double rounding = largest_error(b, c);
  for (const Tensor& j : jittered) rounding = std::max(rounding, largest_error(values_of(j), c));
  const double error = largest_error(a, c);
  if (error <= kErrorRatio * rounding + kErrorFloor * largest_finite(c)) return std::nullopt;
  return str_cat(what, " ", got.shape().to_string(), " differs at element ", first, ": ", a[first],
                 " vs ", b[first], " eager (", c[first], " exact); largest error ", error,
                 ", float32 rounding's ", rounding);
}

// A check's procedure, run once on each model; `tested` says whether this
// run is the mode under test or plain eager execution. Throws for what is
// wrong whatever the values (a graph the passes do not leave as it was).
using Procedure = std::function<Results(BuiltModel& model, bool tested)>;

// Runs `procedure` on the five models of `spec` and judges every tensor the
// tested run yields.
std::optional<std::string> compare_runs(const ModelSpec& spec, const Procedure& procedure,
                                        Tolerance tolerance = {}) {
  BuiltModel eager = build(spec), tested = build(spec), exact = build(spec, DType::kFloat64);
  const Results want = procedure(eager, false);
  const Results got = procedure(tested, true);
  const Results reference = procedure(exact, false);
  std::vector<Results> jittered;
  for (int j = 1; j <= kJittered; ++j) {
    BuiltModel model = build(spec, DType::kFloat32, static_cast<uint64_t>(j));
    jittered.push_back(procedure(model, false));
  }
  if (got.size() != want.size()) {
    return str_cat("the mode yields ", got.size(), " results, eager ", want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    std::vector<Tensor> rounded;
    for (const Results& r : jittered) rounded.push_back(r[i].second);
    if (auto d = judge(got[i].first, got[i].second, want[i].second, reference[i].second, rounded,
                       tolerance)) {
      return d;
    }
  }
  return std::nullopt;
}

// Seeds derived from the model's, one per use, so each draw is reproducible.
uint64_t seed_for(const ModelSpec& spec, uint64_t use) { return spec.seed * 1000003 + use; }

// `x` (made in float32, or tokens) as `model` takes it.
Tensor input_for(const BuiltModel& model, const Tensor& x) {
  return x.dtype() == DType::kFloat32 && model.dtype != x.dtype() ? cast(x, model.dtype) : x;
}

// A regression target of `output`'s shape (at batch `batch`, or the spec's),
// in `model`'s dtype.
Tensor target_for(const ModelSpec& spec, const BuiltModel& model, uint64_t use,
                  std::optional<int64_t> batch = std::nullopt) {
  manual_seed(seed_for(spec, use));
  Dims dims(model.output.begin(), model.output.end());
  if (batch) dims[0] = *batch;
  return input_for(model, randn(dims));
}

// Every parameter and buffer, under `when`.
void add_state(Results& results, const nn::Module& model, const std::string& when) {
  for (const auto& [name, tensor] : model.state_dict()) {
    results.emplace_back(str_cat(when, " ", name), tensor);
  }
}

// The passes' contract on graphs they made: optimizing again changes
// nothing (so it cannot change a value either).
void expect_optimized(const trace::Graph& optimized, const trace::OptimizeOptions& options,
                      const std::string& what) {
  trace::Graph again = optimized;
  trace::optimize(again, options);
  const std::string once = trace::to_text(optimized), twice = trace::to_text(again);
  TANDEM_CHECK(once == twice, "optimizing the ", what, " graph again changes it: once\n", once,
               "twice\n", twice);
}

std::optional<std::string> check_inference(const ModelSpec& spec, const CheckOptions&) {
  return compare_runs(spec, [&](BuiltModel& m, bool tested) {
    m.model->eval();
    if (tested) m.model->hybridize();
    NoGradGuard no_grad;
    Results results;
    int call = 0;
    for (int64_t batch : {spec.batch, spec.batch, spec.other_batch, spec.other_batch, spec.batch}) {
      Tensor x = input_for(m, model_input(spec, batch, seed_for(spec, 10 + call)));
      results.emplace_back(str_cat("call ", call, " (batch ", batch, ") output"),
                           tested ? (*m.model)(x) : m.model->forward(x));
      ++call;
    }
    if (tested) {
      expect_optimized(m.model->hybrid_forward()->last_executor()->graph(), {},
                       "hybridized inference");
    }
    return results;
  });
}

std::optional<std::string> check_training_forward(const ModelSpec& spec, const CheckOptions&) {
  return compare_runs(spec, [&](BuiltModel& m, bool tested) {
    if (tested) m.model->hybridize();
    NoGradGuard no_grad;
    Results results;
    for (int call = 0; call < 3; ++call) {
      Tensor x = input_for(m, model_input(spec, spec.batch, seed_for(spec, 20 + call)));
      // The same seed for every model, so that dropout draws the same masks.
      manual_seed(seed_for(spec, 30 + call));
      results.emplace_back(str_cat("call ", call, " output"),
                           tested ? (*m.model)(x) : m.model->forward(x));
      add_state(results, *m.model, str_cat("after call ", call));
    }
    return results;
  });
}

std::optional<std::string> check_gradients(const ModelSpec& spec, const CheckOptions&) {
  return compare_runs(spec, [&](BuiltModel& m, bool tested) {
    if (tested) m.model->hybridize();
    Results results;
    for (int call = 0; call < 2; ++call) {
      Tensor x = input_for(m, model_input(spec, spec.batch, seed_for(spec, 40 + call)));
      if (!spec.tokens) x = x.detach().requires_grad_();
      const Tensor target = target_for(spec, m, 50 + call);
      m.model->zero_grad();
      manual_seed(seed_for(spec, 60 + call));
      mse_loss(tested ? (*m.model)(x) : m.model->forward(x), target).backward();
      const std::string when = str_cat("call ", call);
      for (const auto& [name, p] : m.model->named_parameters()) {
        results.emplace_back(str_cat(when, " gradient of ", name), p.grad());
      }
      if (!spec.tokens) results.emplace_back(when + " input gradient", x.grad());
      add_state(results, *m.model, "after " + when);
    }
    return results;
  });
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::optional<std::string> check_training(const ModelSpec& spec, const CheckOptions& options,
                                          const MakeOptimizer& make_optimizer) {
  if (build(spec).model->parameters().empty()) return std::nullopt;  // Nothing to train.
  // Training moves the weights by a few learning rates, so the tolerance is
  // wider than for one call.
  const Tolerance tolerance{.rtol = 1e-3, .atol = 1e-4};
  return compare_runs(
      spec,
      [&](BuiltModel& m, bool tested) {
        std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(m.model->parameters());
        auto step = [&](const std::vector<Tensor>& batch) {
          optimizer->zero_grad();
          Tensor loss = mse_loss(m.model->forward(batch[0]), batch[1]);
          loss.backward();
          optimizer->step();
          return std::vector<Tensor>{loss};
        };
        // Odd steps take one more sample: the step traced at the first
        // serves them by its family (batch free), whose fit runs the step
        // at other sizes and must leave no trace of that.
        HybridFunction hybrid_step(
            step, {.warn_after_traces = 0,
                   .dynamic_dims = {{"input0", {{0, "batch"}}}, {"input1", {{0, "batch"}}}},
                   .name = "difftest_step"});
        Results results;
        for (int s = 0; s < options.training_steps; ++s) {
          const int64_t samples = spec.batch + s % 2;
          const std::vector<Tensor> batch{
              input_for(m, model_input(spec, samples, seed_for(spec, 70 + s))),
              target_for(spec, m, 80 + s, samples)};
          manual_seed(seed_for(spec, 90 + s));
          results.emplace_back(str_cat("step ", s, " loss"),
                               tested ? hybrid_step(batch)[0] : step(batch)[0]);
          add_state(results, *m.model, str_cat("after step ", s));
        }
        if (tested) {
          TANDEM_CHECK(hybrid_step.stats().traces == 1, "the training step traced ",
                       hybrid_step.stats().traces, " times for one signature and batch free");
          expect_optimized(hybrid_step.last_executor()->graph(), {}, "training step");
        }
        return results;
      },
      tolerance);
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
  fs::path dir() const { return dir_; }

 private:
  fs::path dir_;
};

// The model of `spec` in eval mode, hybridized, called once at the traced
// batch size and exported to `files` with `options`.
LoadedModel export_and_load(const ModelSpec& spec, const BuiltModel& model,
                            const ScratchModel& files, const ExportOptions& options = {}) {
  {
    NoGradGuard no_grad;
    model.model->hybridize();
    (*model.model)(model_input(spec, spec.batch, seed_for(spec, 100)));
  }
  model.model->export_model(files.path(), options);
  return load(files.path());
}

std::optional<std::string> check_export(const ModelSpec& spec, const CheckOptions& options) {
  return compare_runs(spec, [&](BuiltModel& m, bool tested) {
    m.model->eval();
    std::optional<ScratchModel> files;
    std::optional<LoadedModel> loaded;
    if (tested) {
      files.emplace(options, spec);
      loaded = export_and_load(spec, m, *files);
    }
    NoGradGuard no_grad;
    Results results;
    int call = 0;
    for (int64_t batch : {spec.batch, spec.other_batch, spec.batch}) {
      Tensor x = input_for(m, model_input(spec, batch, seed_for(spec, 110 + call)));
      Tensor y = m.model->forward(x);
      if (tested) {
        std::vector<Tensor> outputs = loaded->run({x});
        TANDEM_CHECK(outputs.size() == 1, "the loaded model returned ", outputs.size(), " outputs");
        y = outputs[0];
      }
      results.emplace_back(str_cat("loaded model, call ", call, " (batch ", batch, ") output"), y);
      ++call;
    }
    return results;
  });
}

std::optional<std::string> check_reoptimize(const ModelSpec& spec, const CheckOptions& options) {
  return compare_runs(spec, [&](BuiltModel& m, bool tested) {
    m.model->eval();
    NoGradGuard no_grad;
    const Tensor x = input_for(m, model_input(spec, spec.batch, seed_for(spec, 120)));
    const std::vector<std::string> variants = {
        "exported graph", "exported graph optimized again",
        "exported graph optimized for inference (as loaded)"};
    Results results;
    if (!tested) {
      const Tensor y = m.model->forward(x);
      for (const std::string& variant : variants) results.emplace_back(variant + ", output", y);
      return results;
    }
    ScratchModel files(options, spec);
    LoadedModel loaded = export_and_load(spec, m, files);
    const serialization::GraphFile& file = loaded.file();
    const serialization::ParamsFile params =
        serialization::read_params((files.dir() / file.params_file).string());
    // The graph as exported, its parameters passed as inputs; optimized
    // once more as a training graph (parameters still inputs); and for
    // inference with them as constants, as a loader does, after which a
    // second optimization must change nothing.
    std::vector<Tensor> inputs{x};
    for (const serialization::NamedTensor& t : params.tensors) inputs.push_back(t.tensor);
    trace::Graph again = file.graph;
    trace::optimize(again);
    trace::Graph constant = file.graph;
    size_t next = 0;
    for (trace::GraphInput& input : constant.inputs) {
      if (input.kind == trace::InputKind::kData) continue;
      input.kind = trace::InputKind::kConstant;
      input.constant = params.tensors[next++].tensor;
    }
    trace::optimize(constant, {.inference = true});
    expect_optimized(constant, {.inference = true}, "loaded");
    const Tensor outputs[] = {trace::Executor(file.graph).run(inputs)[0],
                              trace::Executor(again).run(inputs)[0],
                              trace::Executor(constant).run({x})[0]};
    for (size_t v = 0; v < variants.size(); ++v) {
      results.emplace_back(variants[v] + ", output", outputs[v]);
    }
    return results;
  });
}

// Starting a process costs more than every other check of a model together,
// so one model in this many is also run by tandem-run.
constexpr uint64_t kOneInOtherProcess = 8;

std::optional<std::string> check_other_process(const ModelSpec& spec, const CheckOptions& options) {
  if (spec.seed % kOneInOtherProcess != 0) return std::nullopt;
  return compare_runs(spec, [&](BuiltModel& m, bool tested) {
    m.model->eval();
    NoGradGuard no_grad;
    const Tensor x = model_input(spec, spec.other_batch, seed_for(spec, 130));
    const std::string what = str_cat("tandem-run (batch ", spec.other_batch, ") output");
    if (!tested) return Results{{what, m.model->forward(input_for(m, x))}};
    ScratchModel files(options, spec);
    LoadedModel loaded = export_and_load(spec, m, files);
    const fs::path dir = files.dir();
    serialization::write_npy((dir / "x.npy").string(), x);
    const std::string command =
        str_cat(TANDEM_RUN_PATH, " '", files.path(), ".json' --input '", (dir / "x.npy").string(),
                "' --output '", (dir / "out").string(), "' > '", (dir / "log").string(), "' 2>&1");
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(dir / "log");
      TANDEM_CHECK(false,
                   "tandem-run failed: ", std::string(std::istreambuf_iterator<char>(log), {}));
    }
    return Results{{what, serialization::read_npy(
                              (dir / "out" / (loaded.outputs()[0].name + ".npy")).string())}};
  });
}

// The spec with dimension `axis` of its input (counting the batch as 0)
// of size `size`.
ModelSpec with_input_size(ModelSpec spec, size_t axis, int64_t size) {
  spec.input[axis - 1] = size;
  return spec;
}

// Sizes of dimension `axis` that the export's probes never visit (they
// move by one and two), each with a batch size.
std::vector<std::pair<int64_t, int64_t>> unseen_sizes(const ModelSpec& spec, size_t axis) {
  const int64_t size = spec.input[axis - 1];
  std::vector<std::pair<int64_t, int64_t>> sizes{{spec.other_batch, size + 3}};
  if (size > 3) sizes.emplace_back(spec.batch, size - 3);
  return sizes;
}

// The first axis past the batch along which the eager model also takes
// the unseen sizes (a sequence or a length, not the features a linear
// layer fixes), if any.
std::optional<size_t> length_axis(const ModelSpec& spec) {
  BuiltModel m = build(spec);
  m.model->eval();
  NoGradGuard no_grad;
  for (size_t axis = 1; axis <= spec.input.size(); ++axis) {
    try {
      for (const auto& [batch, size] : unseen_sizes(spec, axis)) {
        m.model->forward(model_input(with_input_size(spec, axis, size), batch, 1));
      }
      return axis;
    } catch (const Error&) {
    }
  }
  return std::nullopt;
}

// Exported with the batch and a length free (ExportOptions::dynamic_dims),
// the loaded model gives the eager answer at lengths it was never traced at,
// or the export refuses the model with an Error (code that no one graph
// follows, such as a recurrence unrolled over the length): never another
// answer.
std::optional<std::string> check_free_length(const ModelSpec& spec, const CheckOptions& options) {
  const std::optional<size_t> axis = length_axis(spec);
  if (!axis) return std::nullopt;
  return compare_runs(spec, [&](BuiltModel& m, bool tested) {
    m.model->eval();
    std::optional<ScratchModel> files;
    std::optional<LoadedModel> loaded;
    if (tested) {
      files.emplace(options, spec);
      try {
        loaded = export_and_load(
            spec, m, *files,
            {.dynamic_dims = {{"input0", {{0, "batch"}, {static_cast<int>(*axis), "len"}}}}});
      } catch (const Error&) {
        // Refused: an answer too (the files were never written); the model
        // runs eagerly below, as the reference does.
      }
    }
    NoGradGuard no_grad;
    Results results;
    int call = 0;
    for (const auto& [batch, size] : unseen_sizes(spec, *axis)) {
      Tensor x = input_for(
          m, model_input(with_input_size(spec, *axis, size), batch, seed_for(spec, 150 + call)));
      results.emplace_back(str_cat("loaded model at batch ", batch, ", length ", size, " output"),
                           loaded ? loaded->run({x})[0] : m.model->forward(x));
      ++call;
    }
    return results;
  });
}

using Check = std::optional<std::string> (*)(const ModelSpec&, const CheckOptions&);

const std::vector<std::pair<std::string, Check>>& checks() {
  static const auto* all = new std::vector<std::pair<std::string, Check>>{
      {"inference", check_inference},     {"training_forward", check_training_forward},
      {"gradients", check_gradients},     {"train_sgd", check_train_sgd},
      {"train_adam", check_train_adam},   {"export", check_export},
      {"reoptimize", check_reoptimize},   {"other_process", check_other_process},
      {"free_length", check_free_length},
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
