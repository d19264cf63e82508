// DistributedDataParallel against one process: N steps on `size` ranks, each
// on its own B rows, give the parameters of N steps of one process on the
// same size * B rows (the loss is a mean, so the full batch's gradient is the
// ranks' average). Every rank also computes that one-process reference
// itself, without communicating.
#include "distributed/data_parallel.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "eager/optim/optim.h"

#include "distributed/collectives.h"

namespace tandem::distributed {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kRowsPerRank = 4;
constexpr int kSteps = 5;

std::shared_ptr<nn::Module> make_net(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(nn::Linear(6, 16), nn::Tanh(), nn::Linear(16, 3));
}

// Rows [begin, begin + count) of a fixed data set: inputs and targets.
std::pair<Tensor, Tensor> rows(int64_t begin, int64_t count) {
  std::vector<float> x, y;
  for (int64_t r = begin; r < begin + count; ++r) {
    for (int j = 0; j < 6; ++j) x.push_back(static_cast<float>(((r * 13 + j * 7) % 17) / 8.0 - 1));
    for (int j = 0; j < 3; ++j) y.push_back(static_cast<float>(((r * 5 + j * 3) % 11) / 5.0 - 1));
  }
  return {Tensor::from_vector<float>(x, Shape{count, 6}),
          Tensor::from_vector<float>(y, Shape{count, 3})};
}

enum class Optim { kSgd, kAdam };

std::unique_ptr<optim::Optimizer> make_optimizer(Optim which, std::vector<Tensor> params) {
  if (which == Optim::kSgd) return std::make_unique<optim::SGD>(std::move(params), 0.1, 0.9);
  return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 0.01});
}

std::vector<std::vector<float>> values_of(const nn::Module& net) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : net.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

// One process, full batches of size * B rows.
std::vector<std::vector<float>> reference_training(Optim which, bool hybridized) {
  const int size = world_size();
  auto net = make_net(1);
  if (hybridized) net->hybridize();
  auto opt = make_optimizer(which, net->parameters());
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = rows(step * size * kRowsPerRank, size * kRowsPerRank);
    Tensor loss = mse_loss((*net)(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  return values_of(*net);
}

// Each rank on its own B rows of each full batch, through DDP. Rank r
// starts from its own weights: DDP's broadcast must replace them.
std::vector<std::vector<float>> ddp_training(Optim which, bool hybridized,
                                             DataParallelOptions options = {}) {
  const int me = rank(), size = world_size();
  auto net = make_net(me == 0 ? 1 : 100 + static_cast<uint64_t>(me));
  if (hybridized) net->hybridize();
  DistributedDataParallel ddp(net, options);
  auto opt = make_optimizer(which, net->parameters());
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = rows((step * size + me) * kRowsPerRank, kRowsPerRank);
    Tensor loss = mse_loss(ddp(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  return values_of(*net);
}

void expect_close(const std::vector<std::vector<float>>& got,
                  const std::vector<std::vector<float>>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(got[p].size(), expected[p].size());
    for (size_t i = 0; i < got[p].size(); ++i) {
      ASSERT_NEAR(got[p][i], expected[p][i], 2e-5 * (1 + std::abs(expected[p][i])))
          << "parameter " << p << " element " << i;
    }
  }
}

struct Mode {
  Optim optim;
  bool hybridized;
};

class DataParallelEquivalenceTest : public ::testing::TestWithParam<Mode> {};

TEST_P(DataParallelEquivalenceTest, RanksTogetherTakeTheStepsOfOneProcessOnTheWholeBatch) {
  const Mode mode = GetParam();
  expect_close(ddp_training(mode.optim, mode.hybridized),
               reference_training(mode.optim, mode.hybridized));
}

TEST_P(DataParallelEquivalenceTest, OneBucketPerParameterGivesTheSameSteps) {
  const Mode mode = GetParam();
  expect_close(ddp_training(mode.optim, mode.hybridized, {.bucket_cap_mb = 1e-6}),
               reference_training(mode.optim, mode.hybridized));
}

INSTANTIATE_TEST_SUITE_P(Modes, DataParallelEquivalenceTest,
                         ::testing::Values(Mode{Optim::kSgd, false}, Mode{Optim::kAdam, false},
                                           Mode{Optim::kSgd, true}, Mode{Optim::kAdam, true}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param.optim == Optim::kSgd ? "Sgd" : "Adam") +
                                  (info.param.hybridized ? "Hybridized" : "Eager");
                         });

TEST(DataParallelTest, BucketsFollowReverseRegistrationOrderUpToTheCap) {
  auto net = make_net(1);
  // Parameters: 6x16 + 16 + 16x3 + 3 floats; a cap of 100 floats.
  DistributedDataParallel ddp(net, {.bucket_cap_mb = 400.0 / (1024 * 1024)});
  EXPECT_EQ(ddp.buckets(),
            (std::vector<std::vector<size_t>>{{3, 2, 1}, {0}}));  // 3 + 48 + 16, then 96.
  DistributedDataParallel whole(net);
  EXPECT_EQ(whole.buckets(), (std::vector<std::vector<size_t>>{{3, 2, 1, 0}}));
}

TEST(DataParallelTest, NoSyncAccumulatesLocallyAndTheNextBackwardAverages) {
  // Two micro-batches of B rows per rank, averaged once: the step of one
  // process on 2 * size * B rows, whose mean loss is the micro-batches'
  // losses halved.
  const int me = rank(), size = world_size();
  auto net = make_net(1);
  DistributedDataParallel ddp(net);
  optim::SGD opt(net->parameters(), 0.1);
  opt.zero_grad();
  {
    DistributedDataParallel::NoSync no_sync(ddp);
    auto [x, y] = rows(me * kRowsPerRank, kRowsPerRank);
    mul(mse_loss(ddp(x), y), 0.5).backward();
  }
  auto [x, y] = rows((size + me) * kRowsPerRank, kRowsPerRank);
  mul(mse_loss(ddp(x), y), 0.5).backward();
  opt.step();

  auto reference = make_net(1);
  optim::SGD reference_opt(reference->parameters(), 0.1);
  reference_opt.zero_grad();
  for (int half = 0; half < 2; ++half) {
    auto [hx, hy] = rows(half * size * kRowsPerRank, size * kRowsPerRank);
    mul(mse_loss((*reference)(hx), hy), 0.5).backward();
  }
  reference_opt.step();
  expect_close(values_of(*net), values_of(*reference));
}

// A module whose second layer only rank 0 uses.
class Branchy : public nn::Module {
 public:
  Branchy() {
    manual_seed(3);
    used_ = register_module("used", std::make_shared<nn::Linear>(4, 4));
    sometimes_ = register_module("sometimes", std::make_shared<nn::Linear>(4, 4));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*used_)(x);
    return rank() == 0 ? (*sometimes_)(h) : h;
  }

 private:
  std::shared_ptr<nn::Linear> used_, sometimes_;
};

TEST(DataParallelTest, UnusedParametersAreAnErrorUnlessAllowed) {
  if (world_size() == 1) GTEST_SKIP() << "every parameter is used on the one rank";
  {
    auto net = std::make_shared<Branchy>();
    DistributedDataParallel ddp(net, {.find_unused_parameters = true});
    Tensor x = full({2, 4}, 1.0);
    sum(ddp(x)).backward();
    // Rank 0's gradient of the branch, averaged with the others' zeros.
    Tensor grad = net->named_parameters()[2].second.grad();
    ASSERT_TRUE(grad.defined());
    std::vector<float> all = all_gather(grad).to_vector<float>();
    for (int64_t i = 0; i < grad.numel(); ++i) {
      EXPECT_FLOAT_EQ(all[static_cast<size_t>(i)],
                      all[static_cast<size_t>(grad.numel() * (world_size() - 1) + i)]);
    }
  }
  auto net = std::make_shared<Branchy>();
  DistributedDataParallel ddp(net);
  Tensor out = sum(ddp(full({2, 4}, 1.0)));
  if (rank() == 0) {
    out.backward();  // Rank 0 uses every parameter: one bucket of 40 floats.
    return;
  }
  try {
    out.backward();
    ADD_FAILURE() << "an unused parameter was averaged silently";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("sometimes.weight"));
    EXPECT_THAT(e.what(), HasSubstr("find_unused_parameters"));
  }
  // The refusal pushed nothing; match rank 0's bucket so that the world's
  // collectives stay paired for the tests after this one.
  all_reduce(zeros({40}), ReduceOp::kMean).to_vector<float>();
}

// BatchNorm's running statistics follow each rank's own batches; with
// broadcast_buffers (the default) every forward starts from rank 0's.
TEST(DataParallelTest, BuffersFollowRankZeroBeforeEachForward) {
  const int me = rank(), size = world_size();
  if (size == 1) GTEST_SKIP() << "one rank has nothing to differ from";
  for (bool broadcast_buffers : {true, false}) {
    manual_seed(5);
    auto net = std::make_shared<nn::Sequential>(nn::Linear(6, 4), nn::BatchNorm1d(4));
    DistributedDataParallel ddp(net, {.broadcast_buffers = broadcast_buffers});
    auto [x, y] = rows(me * kRowsPerRank, kRowsPerRank);  // Each rank its own rows.
    ddp(x);                                               // Updates this rank's statistics.
    net->eval();
    ddp(x);  // Eval: no update, so a broadcast leaves rank 0's statistics everywhere.
    Tensor mean = net->named_buffers()[0].second;
    std::vector<float> all = all_gather(mean).to_vector<float>();
    const size_t n = static_cast<size_t>(mean.numel());
    bool same = true;
    for (size_t i = 0; i < n; ++i) same = same && all[i] == all[n * (size - 1) + i];
    EXPECT_EQ(same, broadcast_buffers) << "broadcast_buffers = " << broadcast_buffers;
  }
}

TEST(DataParallelTest, AHybridizedTrainingStepReplaysItsAllReduces) {
  const int me = rank(), size = world_size();
  auto net = make_net(1);
  DistributedDataParallel ddp(net);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(Optim::kSgd, net->parameters());
  HybridFunction step([&](const std::vector<Tensor>& in) {
    Tensor loss = mse_loss(ddp(in[0]), in[1]);
    opt->zero_grad();
    loss.backward();
    opt->step();
    return std::vector<Tensor>{loss};
  });
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = rows((s * size + me) * kRowsPerRank, kRowsPerRank);
    step({x, y});
  }
  EXPECT_EQ(step.stats().traces, 1);
  EXPECT_EQ(step.stats().replays, kSteps - 1);
  expect_close(values_of(*net), reference_training(Optim::kSgd, false));
}

}  // namespace
}  // namespace tandem::distributed
