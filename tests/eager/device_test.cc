// The eager layer on devices: Module::to, optimizer state and autograd
// following the parameters' device, the DataLoader's pin_memory option, and
// training on cuda:0 against the CPU. Tests that need a GPU skip by name
// without one; the rest check what a CPU-only machine can (to(cpu) is a
// no-op, a missing device is a clear error, pin_memory is a no-op).
#include "core/device.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/data/dataloader.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "eager/optim/optim.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

constexpr const char* kNoGpu = "no CUDA device on this machine";

// A small MLP with every kind of tensor a module keeps: parameters, a
// bias-free layer's constant, BatchNorm's buffers.
std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(nn::Linear(6, 16), nn::BatchNorm1d(16), nn::ReLU(),
                                          nn::Linear(16, 8, /*bias=*/false), nn::ReLU(),
                                          nn::Linear(8, 3));
}

struct Data {
  Tensor x, y;
};

Data make_data() {
  manual_seed(7);
  return {randn({32, 6}),
          Tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 2, 1, 1, 0, 2,
                                        2, 0, 1, 2, 0, 1, 0, 2, 1, 0, 2, 2, 1, 0, 1, 0},
                                       {32})};
}

enum class OptimizerKind { kSgdMomentum, kAdam };

std::unique_ptr<optim::Optimizer> make_optimizer(OptimizerKind kind, std::vector<Tensor> params) {
  if (kind == OptimizerKind::kSgdMomentum) {
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }
  return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 1e-2});
}

// Builds the MLP from `seed`, moves it to `device` (before or after making
// the optimizer) and trains it for `steps` steps; returns the losses.
std::vector<float> train_losses(Device device, OptimizerKind kind, bool optimizer_first,
                                int steps = 5) {
  Data data = make_data();
  manual_seed(42);
  auto net = make_mlp();
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer_first) opt = make_optimizer(kind, net->parameters());
  net->to(device);
  if (!optimizer_first) opt = make_optimizer(kind, net->parameters());
  const Tensor x = data.x.to(device), y = data.y.to(device);
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    opt->zero_grad();
    Tensor loss = cross_entropy((*net)(x), y);
    loss.backward();
    opt->step();
    losses.push_back(loss.item<float>());
  }
  for (const Tensor& p : net->parameters()) EXPECT_EQ(p.device(), device);
  for (const Tensor& b : net->buffers()) EXPECT_EQ(b.device(), device);
  return losses;
}

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], 1e-4f * (1 + std::abs(cpu[i]))) << "step " << i;
  }
}

// ---- Module::to on the CPU, and a missing device. ----

// Verifies that to(cpu) on a CPU module changes nothing: same handles, same
// data, same names, still leaves that require grad.
TEST(ModuleTo, CpuIsANoOp) {
  auto net = make_mlp();
  const nn::NamedTensors before = net->named_parameters();
  const nn::NamedTensors buffers_before = net->named_buffers();
  std::vector<const void*> storages;
  for (const auto& [name, p] : before) storages.push_back(p.storage().get());

  nn::Module& returned = net->to(Device::cpu());
  EXPECT_EQ(&returned, net.get());

  const nn::NamedTensors after = net->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_EQ(after[i].second.impl_ptr(), before[i].second.impl_ptr());
    EXPECT_EQ(after[i].second.storage().get(), storages[i]) << before[i].first;
    EXPECT_TRUE(after[i].second.requires_grad());
    EXPECT_EQ(after[i].second.impl_ptr()->autograd->grad_fn, nullptr);
  }
  const nn::NamedTensors buffers_after = net->named_buffers();
  ASSERT_EQ(buffers_after.size(), buffers_before.size());
  for (size_t i = 0; i < buffers_before.size(); ++i) {
    EXPECT_EQ(buffers_after[i].second.storage(), buffers_before[i].second.storage());
  }
}

// Verifies that moving to a device the machine lacks is a tandem::Error that
// names the module and the device, and moves nothing.
TEST(ModuleTo, MissingDeviceIsAClearError) {
  auto net = make_mlp();
  const Device missing = Device::cuda(cuda_device_count());
  const Tensor weight = net->parameters()[0];
  try {
    net->to(missing);
    ADD_FAILURE() << "expected a tandem::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Sequential.to(" + missing.to_string() + ")"));
    EXPECT_THAT(e.what(), HasSubstr(cuda_device_count() == 0 ? "this machine has no CUDA device"
                                                             : "CUDA device(s)"));
  }
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.device().is_cpu());
  EXPECT_TRUE(weight.device().is_cpu());
}

// Verifies that a module cannot be moved while a function is being traced:
// the trace could not record the rebinding.
TEST(ModuleTo, RefusedWhileTracing) {
  auto net = make_mlp();
  HybridFunction f([&](const std::vector<Tensor>& in) {
    net->to(Device::cpu());
    return std::vector<Tensor>{(*net)(in[0])};
  });
  try {
    NoGradGuard no_grad;
    f({randn({4, 6})});
    ADD_FAILURE() << "expected a tandem::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("being traced"));
  }
}

// Verifies that to() returns the module, so calls chain, and that the moved
// (here: unmoved) module still trains with an optimizer made before.
TEST(ModuleTo, CpuTrainingUnchangedByTo) {
  const std::vector<float> plain = train_losses(Device::cpu(), OptimizerKind::kAdam, false);
  const std::vector<float> again = train_losses(Device::cpu(), OptimizerKind::kAdam, true);
  EXPECT_EQ(plain, again);
  EXPECT_LT(plain.back(), plain.front());
}

// Verifies that optimizer state is made on its parameter's device.
TEST(OptimizerDevice, StateOnTheParametersDevice) {
  auto net = make_mlp();
  optim::Adam adam(net->parameters(), {.lr = 1e-3});
  for (size_t i = 0; i < adam.params().size(); ++i) {
    EXPECT_EQ(adam.exp_avg(i).device(), adam.params()[i].device());
    EXPECT_EQ(adam.exp_avg_sq(i).device(), adam.params()[i].device());
  }
}

// ---- DataLoader pin_memory. ----

std::vector<std::vector<float>> epoch_values(const data::DataLoaderOptions& options,
                                             const Tensor& rows) {
  data::DataLoader loader({rows}, options);
  std::vector<std::vector<float>> out;
  for (const data::Batch& batch : loader) {
    if (cuda_device_count() > 0 && options.pin_memory) {
      EXPECT_TRUE(batch[0].is_pinned());
    } else {
      EXPECT_FALSE(batch[0].is_pinned());
    }
    out.push_back(batch[0].to_vector<float>());
  }
  return out;
}

// Verifies that pin_memory gives the same batches, pinned where a CUDA device
// exists and as plain memory (a no-op) where none does; with and without a
// transform and a producer thread.
TEST(DataLoaderPinMemory, SameBatchesPinnedWhenPossible) {
  std::vector<float> values(40);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const Tensor rows = Tensor::from_vector<float>(values, {10, 4});
  for (int prefetch : {0, 2}) {
    for (bool transform : {false, true}) {
      data::DataLoaderOptions options;
      options.batch_size = 3;
      options.shuffle = true;
      options.seed = 5;
      options.prefetch = prefetch;
      if (transform) {
        options.transform = [](data::Batch batch) { return data::Batch{mul(batch[0], 2.0)}; };
      }
      const auto plain = epoch_values(options, rows);
      options.pin_memory = true;
      const auto pinned = epoch_values(options, rows);
      EXPECT_EQ(pinned, plain) << "prefetch " << prefetch << ", transform " << transform;
      ASSERT_EQ(plain.size(), 4u);
    }
  }
}

// ---- On cuda:0 (skipped without a GPU). ----

// Verifies that a tiny MLP trains on cuda:0 as on the CPU from the same seed:
// the same losses, step for step, within float32 tolerance; for SGD with
// momentum and for Adam, optimizers made after to() and before it.
TEST(CudaTraining, MlpMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoGpu;
  for (OptimizerKind kind : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdam}) {
    for (bool optimizer_first : {false, true}) {
      SCOPED_TRACE(str_cat(kind == OptimizerKind::kAdam ? "Adam" : "SGD", ", optimizer made ",
                           optimizer_first ? "before" : "after", " to()"));
      const std::vector<float> cpu = train_losses(Device::cpu(), kind, optimizer_first);
      const std::vector<float> gpu = train_losses(Device::cuda(0), kind, optimizer_first);
      expect_close(gpu, cpu);
    }
  }
}

// Verifies that to(cuda) keeps each parameter a leaf that requires grad, under
// the same handle and name, moves an accumulated gradient with it, and that
// to(cpu) brings back the same values.
TEST(CudaTraining, ToKeepsLeavesAndHandles) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoGpu;
  auto net = make_mlp();
  Data data = make_data();
  cross_entropy((*net)(data.x), data.y).backward();
  const nn::NamedTensors before = net->named_parameters();
  std::vector<std::vector<float>> values, grads;
  for (const auto& [name, p] : before) {
    values.push_back(p.to_vector<float>());
    grads.push_back(p.grad().to_vector<float>());
  }
  net->to(Device::cuda(0));
  const nn::NamedTensors after = net->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    const Tensor& p = after[i].second;
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_EQ(p.impl_ptr(), before[i].second.impl_ptr());
    EXPECT_EQ(p.device(), Device::cuda(0));
    EXPECT_TRUE(p.requires_grad());
    EXPECT_EQ(p.grad().device(), Device::cuda(0));
    EXPECT_EQ(p.to_vector<float>(), values[i]) << after[i].first;
    EXPECT_EQ(p.grad().to_vector<float>(), grads[i]) << after[i].first;
  }
  net->to(Device::cpu());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(after[i].second.device().is_cpu());
    EXPECT_EQ(after[i].second.to_vector<float>(), values[i]);
  }
}

// Verifies that a hybridized module trains on cuda:0 like the eager one on
// the CPU (the traced backward's seed is made on the output's device).
TEST(CudaTraining, HybridizedMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoGpu;
  auto run = [](Device device) {
    Data data = make_data();
    manual_seed(42);
    auto net = make_mlp();
    net->to(device);
    net->hybridize(device.is_cuda());
    optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
    std::vector<float> losses;
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad();
      Tensor loss = cross_entropy((*net)(data.x.to(device)), data.y.to(device));
      loss.backward();
      opt.step();
      losses.push_back(loss.item<float>());
    }
    return losses;
  };
  expect_close(run(Device::cuda(0)), run(Device::cpu()));
}

// Verifies that a GPU model's checkpoint is written from the CPU and loads
// back into a GPU model, and that exporting asks for the CPU.
TEST(CudaTraining, CheckpointAndExport) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoGpu;
  manual_seed(3);
  auto net = make_mlp();
  net->to(Device::cuda(0));
  const std::string path =
      (std::filesystem::temp_directory_path() / "tandem_device_test.params").string();
  net->save(path);
  manual_seed(4);
  auto other = make_mlp();
  other->to(Device::cuda(0));
  other->load(path);
  std::remove(path.c_str());
  const nn::NamedTensors a = net->named_parameters(), b = other->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].second.device(), Device::cuda(0));
    EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
  }
  net->hybridize();
  {
    NoGradGuard no_grad;
    (*net)(randn({2, 6}, DType::kFloat32, Device::cuda(0)));
  }
  try {
    net->export_model("unused");
    ADD_FAILURE() << "expected a tandem::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("to(Device::cpu())"));
  }
}

}  // namespace
}  // namespace tandem
