// The CUDA device below the kernels: the device count, memory, copies,
// pinned host memory and the engine's GPU worker (Note [GPU ops complete at
// launch]). Every test but the first two needs a GPU and is skipped, by
// name, without one.
#include <cstdint>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {
namespace {

#define TANDEM_NEED_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

// `t` copied to `device` by an op on the GPU that holds either side, the way
// the to_device kernel does it.
Tensor copy_to(const Tensor& t, Device device) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  Device gpu = device.is_cuda() ? device : t.device();
  engine::current().push(
      [from = t.snapshot(), to = out.snapshot()](const engine::RunContext& run) {
        cuda::copy_async(to.raw_data(), from.raw_data(), from.nbytes(), run.stream);
      },
      gpu, {t.var()}, {out.var()}, "copy");
  return out;
}

// The NVIDIA device nodes of this machine (/dev/nvidia0, /dev/nvidia1, ...):
// the driver makes one per GPU it lets this process see.
int nvidia_device_nodes() {
  std::error_code error;
  int nodes = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", error)) {
    nodes += std::regex_match(entry.path().filename().string(), std::regex("nvidia[0-9]+"));
  }
  return nodes;
}

// Verifies that cuda_device_count() is the CUDA runtime's own answer (0 where
// the runtime reports an error, as without a driver), 0 in a build without
// CUDA, and no more than the GPUs the driver exposes as device nodes.
TEST(CudaDeviceTest, DeviceCountIsTheRuntimes) {
  const int count = cuda_device_count();
#ifdef TANDEM_WITH_CUDA
  int runtime = 0;
  if (cudaGetDeviceCount(&runtime) != cudaSuccess) {
    cudaGetLastError();  // Leave no error behind for the next CUDA call.
    runtime = 0;
  }
  EXPECT_EQ(count, runtime);
#else
  EXPECT_EQ(count, 0) << "a build without CUDA sees no device";
#endif
  if (!std::filesystem::exists("/dev/dxg")) {  // WSL's GPUs have no /dev/nvidiaN.
    EXPECT_LE(count, nvidia_device_nodes()) << "a device with no /dev/nvidia* node";
  }
  EXPECT_EQ(cuda_device_count(), count);  // Stable across calls.
}

TEST(CudaDeviceTest, NamesTheMissingDevice) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  try {
    Tensor::empty({4}, DType::kFloat32, Device::cuda(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0 CUDA device"), std::string::npos) << e.what();
  }
}

TEST(CudaDeviceTest, ValuesSurviveARoundTrip) {
  TANDEM_NEED_GPU();
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  Tensor x = Tensor::from_vector<float>(values, {10, 100});
  Tensor on_gpu = copy_to(x, Device::cuda(0));
  EXPECT_EQ(on_gpu.device(), Device::cuda(0));
  // Reading a GPU tensor copies it to the host first (core/tensor.h).
  EXPECT_EQ(on_gpu.to_vector<float>(), values);
  EXPECT_EQ(copy_to(on_gpu, Device::cpu()).to_vector<float>(), values);
  EXPECT_EQ(on_gpu.reshape({1000}).slice(999, 1000).item<float>(), 499.5f);
}

TEST(CudaDeviceTest, AChainOfGpuOpsRunsInPushOrder) {
  TANDEM_NEED_GPU();
  // Each op overwrites the previous op's output with a copy of an input it
  // is given: only push order on the one stream gives the last value.
  Tensor y = copy_to(Tensor::from_vector<int64_t>({0}, {1}), Device::cuda(0));
  for (int64_t i = 1; i <= 200; ++i) {
    Tensor next = copy_to(Tensor::from_vector<int64_t>({i}, {1}), Device::cuda(0));
    engine::current().push(
        [from = next.snapshot(), to = y.snapshot()](const engine::RunContext& run) {
          cuda::copy_async(to.raw_data(), from.raw_data(), from.nbytes(), run.stream);
        },
        Device::cuda(0), {next.var()}, {y.var()}, "overwrite");
  }
  EXPECT_EQ(y.item<int64_t>(), 200);
}

TEST(CudaDeviceTest, PinnedCopyKeepsTheValues) {
  TANDEM_NEED_GPU();
  Tensor x = Tensor::from_vector<double>({1, 2, 3}, {3});
  Tensor pinned = x.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_FALSE(x.is_pinned());
  EXPECT_EQ(copy_to(pinned, Device::cuda(0)).to_vector<double>(), (std::vector<double>{1, 2, 3}));
}

TEST(CudaDeviceTest, OutOfMemoryIsAnErrorAndTheDeviceStaysUsable) {
  TANDEM_NEED_GPU();
  try {
    Tensor::empty({int64_t{1} << 46}, DType::kUInt8, Device::cuda(0));  // 64 TiB.
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on cuda:0"), std::string::npos) << e.what();
  }
  Tensor x = Tensor::from_vector<float>({7}, {1});
  EXPECT_EQ(copy_to(x, Device::cuda(0)).item<float>(), 7.0f);
}

TEST(CudaDeviceTest, DeviceBlocksAreReused) {
  TANDEM_NEED_GPU();
  Allocator& allocator = allocator_for(Device::cuda(0));
  void* first = allocator.allocate(1 << 20);
  allocator.deallocate(first, 1 << 20);
  int64_t hits = allocator.stats().cache_hits;
  void* second = allocator.allocate(1 << 20);
  EXPECT_EQ(second, first);
  EXPECT_EQ(allocator.stats().cache_hits, hits + 1);
  allocator.deallocate(second, 1 << 20);
}

}  // namespace
}  // namespace tandem
