// Note [Collectives of GPU tensors] (distributed/nccl_collectives.h): each
// collective of CUDA tensors, through NCCL, gives what the same collective
// of CPU tensors gives (through MPI, checked against sequential references
// in collectives_test.cc), eagerly and in a hybridized function. One device
// per rank (cuda:rank): skipped where the machine has fewer GPUs than the
// world has ranks, which includes every machine without one;
// tools/gpu_check.sh runs them where a GPU is lent.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

#include "core/device.h"
#include "eager/hybridize.h"
#include "eager/ops.h"

#include "distributed/collectives.h"
#include "distributed/distributed.h"

namespace tandem::distributed {
namespace {

// Rank r's element i, exact in every dtype and in sums of a few ranks.
Tensor input_of(int r, int64_t n, DType dtype) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = (r * 5 + i * 7) % 37;
  return cast(Tensor::from_vector<double>(values, Shape{n}), dtype);
}

std::vector<double> on_cpu(const Tensor& t) {
  return cast(t.to(Device::cpu()), DType::kFloat64).to_vector<double>();
}

class GpuCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() < world_size()) {
      GTEST_SKIP() << "needs a GPU per rank: " << world_size() << " ranks, " << cuda_device_count()
                   << " GPUs";
    }
  }
  Device gpu() const { return Device::cuda(rank()); }
};

const std::vector<int64_t> kSizes = {0, 1, 7, (int64_t{1} << 18) + 3};
const std::vector<DType> kReducible = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                       DType::kInt64, DType::kUInt8};

TEST_F(GpuCollectivesTest, AllReduceMatchesTheCpus) {
  for (DType dtype : kReducible) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
      if (op == ReduceOp::kMean && !is_floating_point(dtype)) continue;
      for (int64_t n : kSizes) {
        const Tensor x = input_of(rank(), n, dtype);
        const Tensor got = all_reduce(x.to(gpu()), op);
        ASSERT_EQ(got.device(), gpu());
        const std::vector<double> expected = on_cpu(all_reduce(x, op)), actual = on_cpu(got);
        ASSERT_EQ(actual.size(), expected.size());
        for (size_t i = 0; i < actual.size(); ++i) {
          ASSERT_NEAR(actual[i], expected[i], 1e-6 * std::abs(expected[i]))
              << dtype_name(dtype) << " " << kernels::reduction_name(op) << " n=" << n;
        }
      }
    }
  }
}

TEST_F(GpuCollectivesTest, BroadcastAllGatherAndReduceScatterMatchTheCpus) {
  const int size = world_size();
  for (DType dtype : kReducible) {
    for (int64_t n : kSizes) {
      const Tensor x = input_of(rank(), n * size, dtype);
      for (int root = 0; root < size; ++root) {
        EXPECT_EQ(on_cpu(broadcast(x.to(gpu()), root)), on_cpu(broadcast(x, root)))
            << dtype_name(dtype) << " root " << root << " n=" << n;
      }
      EXPECT_EQ(on_cpu(all_gather(x.to(gpu()))), on_cpu(all_gather(x)))
          << dtype_name(dtype) << " n=" << n;
      EXPECT_EQ(on_cpu(reduce_scatter(x.to(gpu()))), on_cpu(reduce_scatter(x)))
          << dtype_name(dtype) << " n=" << n;
    }
  }
  // Dtypes NCCL does not reduce travel as bytes.
  const Tensor halves = cast(input_of(rank(), 9, DType::kFloat32), DType::kBFloat16);
  EXPECT_EQ(on_cpu(all_gather(halves.to(gpu()))), on_cpu(all_gather(halves)));
}

TEST_F(GpuCollectivesTest, AHybridizedFunctionReplaysItsGpuCollectives) {
  HybridFunction averaged([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(all_reduce(in[0], ReduceOp::kMean), in[0])};
  });
  for (int call = 0; call < 3; ++call) {
    const Tensor x = full({64}, static_cast<double>(rank() + call));
    const Tensor expected = mul(all_reduce(x, ReduceOp::kMean), x);
    EXPECT_EQ(on_cpu(averaged({x.to(gpu())})[0]), on_cpu(expected)) << "call " << call;
  }
  EXPECT_EQ(averaged.stats().replays, 2);
}

}  // namespace
}  // namespace tandem::distributed
