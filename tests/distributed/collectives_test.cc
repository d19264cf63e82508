// Each collective against a sequential reference: every rank computes what
// every other rank holds (the inputs are a function of rank and index), so
// it knows the answer without communicating. Every dtype, sizes 0, 1, odd
// and large.
#include "distributed/collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/hybridize.h"
#include "eager/ops.h"
#include "serialization/model.h"
#include "trace/executor.h"

namespace tandem::distributed {
namespace {

using ::testing::HasSubstr;

// Rank r's element i: small integers, exact in every dtype and in sums of a
// few ranks.
double value(int r, int64_t i) { return static_cast<double>((r * 7 + i * 3) % 41); }

Tensor input_of(int r, int64_t n, DType dtype) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = value(r, i);
  return cast(Tensor::from_vector<double>(values, Shape{n}), dtype);
}

// The elements as doubles, whatever the dtype.
std::vector<double> as_doubles(const Tensor& t) {
  return cast(t, DType::kFloat64).to_vector<double>();
}

const std::vector<int64_t> kSizes = {0, 1, 7, (int64_t{1} << 18) + 3};
const std::vector<DType> kReducible = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                       DType::kInt64, DType::kUInt8};
const std::vector<DType> kAll = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                 DType::kBFloat16, DType::kInt32,   DType::kInt64,
                                 DType::kUInt8,    DType::kBool};

TEST(CollectivesTest, AllReduceMatchesTheSequentialReduction) {
  const int me = rank(), size = world_size();
  for (DType dtype : kReducible) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
      if (op == ReduceOp::kMean && !is_floating_point(dtype)) continue;
      for (int64_t n : kSizes) {
        Tensor result = all_reduce(input_of(me, n, dtype), op);
        ASSERT_EQ(result.dtype(), dtype);
        ASSERT_EQ(result.shape(), Shape{n});
        std::vector<double> got = as_doubles(result);
        for (int64_t i = 0; i < n; ++i) {
          double expected = value(0, i);
          for (int r = 1; r < size; ++r) {
            if (op == ReduceOp::kMax) expected = std::max(expected, value(r, i));
            if (op == ReduceOp::kMin) expected = std::min(expected, value(r, i));
            if (op == ReduceOp::kSum || op == ReduceOp::kMean) expected += value(r, i);
          }
          if (op == ReduceOp::kMean) expected /= size;
          ASSERT_NEAR(got[static_cast<size_t>(i)], expected, 1e-6 * std::abs(expected))
              << dtype_name(dtype) << " " << kernels::reduction_name(op) << " n=" << n
              << " i=" << i;
        }
      }
    }
  }
}

TEST(CollectivesTest, BroadcastGivesEveryRankTheRootsTensor) {
  const int me = rank(), size = world_size();
  for (DType dtype : kAll) {
    for (int root = 0; root < size; ++root) {
      for (int64_t n : kSizes) {
        Tensor got = broadcast(input_of(me, n, dtype), root);
        ASSERT_EQ(got.dtype(), dtype);
        EXPECT_EQ(as_doubles(got), as_doubles(input_of(root, n, dtype)))
            << dtype_name(dtype) << " root " << root << " n=" << n;
      }
    }
  }
}

TEST(CollectivesTest, AllGatherConcatenatesInRankOrder) {
  const int me = rank(), size = world_size();
  for (DType dtype : kAll) {
    for (int64_t n : kSizes) {
      Tensor got = all_gather(input_of(me, n, dtype));
      ASSERT_EQ(got.shape(), Shape{n * size});
      std::vector<double> expected;
      for (int r = 0; r < size; ++r) {
        std::vector<double> part = as_doubles(input_of(r, n, dtype));
        expected.insert(expected.end(), part.begin(), part.end());
      }
      EXPECT_EQ(as_doubles(got), expected) << dtype_name(dtype) << " n=" << n;
    }
  }
  // A scalar gathers to a vector, a matrix along its rows.
  EXPECT_EQ(all_gather(Tensor::from_vector<float>({static_cast<float>(me)}, Shape{})).shape(),
            Shape{size});
  EXPECT_EQ(all_gather(zeros({2, 3})).shape(), (Shape{2 * size, 3}));
}

TEST(CollectivesTest, ReduceScatterKeepsThisRanksPartOfTheSum) {
  const int me = rank(), size = world_size();
  for (DType dtype : kReducible) {
    for (int64_t part : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1} << 16}) {
      const int64_t n = part * size;
      Tensor got = reduce_scatter(input_of(me, n, dtype), ReduceOp::kSum);
      ASSERT_EQ(got.shape(), Shape{part});
      std::vector<double> values = as_doubles(got);
      for (int64_t i = 0; i < part; ++i) {
        double expected = 0;
        for (int r = 0; r < size; ++r) expected += value(r, me * part + i);
        ASSERT_EQ(values[static_cast<size_t>(i)], expected) << dtype_name(dtype) << " i=" << i;
      }
    }
  }
}

// In place, Tandem's way: assign_ rebinds the tensor to the result (as an
// optimizer's update does), and what was taken from it before keeps the old
// values.
TEST(CollectivesTest, InPlaceThroughAssignKeepsEarlierSnapshots) {
  const int me = rank(), size = world_size();
  for (DType dtype : kReducible) {
    Tensor x = input_of(me, 7, dtype);
    Tensor before = x.snapshot();
    x.assign_(all_reduce(x));
    std::vector<double> got = as_doubles(x);
    for (int64_t i = 0; i < 7; ++i) {
      double expected = 0;
      for (int r = 0; r < size; ++r) expected += value(r, i);
      EXPECT_EQ(got[static_cast<size_t>(i)], expected) << dtype_name(dtype);
    }
    EXPECT_EQ(as_doubles(before), as_doubles(input_of(me, 7, dtype)));
    x.assign_(broadcast(x, size - 1));
    EXPECT_EQ(as_doubles(x), got);  // Every rank holds the same sum.
  }
}

TEST(CollectivesTest, ResultsFeedLaterOpsAndCollectivesKeepProgramOrder) {
  // Many collectives in flight, with ops between them that read earlier
  // results: each must pair with the same collective on every rank.
  const int size = world_size();
  Tensor x = full({1000}, 1.0);
  std::vector<Tensor> results;
  for (int step = 0; step < 20; ++step) {
    x = add(all_reduce(x), full({1000}, 1.0));  // x <- size * x + 1
    results.push_back(all_gather(x));
  }
  double expected = 1;
  for (int step = 0; step < 20; ++step) expected = size * expected + 1;
  std::vector<float> got = x.to_vector<float>();
  EXPECT_FLOAT_EQ(got.front(), static_cast<float>(expected));
  EXPECT_EQ(results.back().shape(), Shape{1000 * size});
}

TEST(CollectivesTest, WrongInputsAreErrorsNamingTheOp) {
  EXPECT_THROW(all_reduce(cast(zeros({3}), DType::kBool)), Error);
  try {
    all_reduce(cast(zeros({3}), DType::kInt64), ReduceOp::kMean);
    ADD_FAILURE() << "a mean of integers was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_reduce"));
    EXPECT_THAT(e.what(), HasSubstr("int64"));
  }
  EXPECT_THROW(broadcast(zeros({3}), world_size()), Error);
  if (world_size() > 1) {
    EXPECT_THROW(reduce_scatter(zeros({world_size() + 1})), Error);
  }
}

TEST(CollectivesTest, AHybridizedFunctionReplaysItsCollectives) {
  const int me = rank(), size = world_size();
  HybridFunction averaged([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(all_reduce(in[0], ReduceOp::kMean), in[0])};
  });
  for (int call = 0; call < 3; ++call) {
    Tensor x = full({4}, static_cast<double>(me + call));
    std::vector<float> got = averaged({x})[0].to_vector<float>();
    double mean = 0;
    for (int r = 0; r < size; ++r) mean += r + call;
    mean /= size;
    EXPECT_FLOAT_EQ(got[0], static_cast<float>(mean * (me + call))) << "call " << call;
  }
  EXPECT_EQ(averaged.stats().traces, 1);
  EXPECT_EQ(averaged.stats().replays, 2);
}

// The passes keep every collective: a constant's all-reduce is not folded
// (its value is the other ranks' too), and two alike are not merged (another
// rank's graph may tell them apart).
TEST(CollectivesTest, PassesNeitherFoldNorMergeCollectives) {
  const int me = rank(), size = world_size();
  HybridFunction twice([me](const std::vector<Tensor>& in) {
    Tensor constant = full({3}, static_cast<double>(me));
    return std::vector<Tensor>{add(all_reduce(in[0]), all_reduce(in[0])), all_reduce(constant)};
  });
  std::vector<Tensor> out = twice({full({3}, 1.0)});
  EXPECT_FLOAT_EQ(out[0].to_vector<float>()[0], static_cast<float>(2 * size));
  EXPECT_FLOAT_EQ(out[1].to_vector<float>()[0], static_cast<float>(size * (size - 1) / 2));
  int collectives = 0;
  for (const trace::Node& node : twice.last_executor()->graph().nodes) {
    collectives += node.op->collective ? 1 : 0;
  }
  EXPECT_EQ(collectives, 3);
}

// Exported and loaded, a graph's collectives run with the loading
// program's group of the same number: here every rank exports its own copy
// and loads it back, and the loaded graph all-reduces like the eager code.
TEST(CollectivesTest, AnExportedGraphLoadedBackStillReduces) {
  const int me = rank(), size = world_size();
  HybridFunction doubled_sum([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(all_reduce(in[0]), 2.0)};
  });
  doubled_sum({full({3}, 1.0)});
  const std::string path =
      str_cat(::testing::TempDir(), "tandem_distributed_export_rank", me, "_of_", size);
  doubled_sum.export_model(path);  // Checks the loaded graph against eager, collectively too.
  LoadedModel loaded = load(path + ".json");
  std::vector<float> got = loaded.run({full({3}, static_cast<double>(me))})[0].to_vector<float>();
  EXPECT_FLOAT_EQ(got[0], static_cast<float>(size * (size - 1)));  // 2 * (0 + 1 + ... + size-1)
}

TEST(CollectivesTest, ASubgroupReducesAmongItsMembersOnly) {
  const int me = rank(), size = world_size();
  std::vector<int> evens;
  for (int r = 0; r < size; r += 2) evens.push_back(r);
  ProcessGroup group = new_group(evens);
  if (!group.contains_me()) {
    EXPECT_THROW(all_reduce(zeros({2}), ReduceOp::kSum, group), Error);
    return;
  }
  EXPECT_EQ(group.size(), static_cast<int>(evens.size()));
  EXPECT_EQ(group.rank(), me / 2);
  double expected = 0;
  for (int r : evens) expected += r;
  Tensor got = all_reduce(full({3}, static_cast<double>(me)), ReduceOp::kSum, group);
  EXPECT_FLOAT_EQ(got.to_vector<float>()[0], static_cast<float>(expected));
  barrier(group);
}

// Note [A collective that does not finish]: the last rank is late; every
// other rank's collective fails within the timeout, naming the collective
// and the late rank, and the group stays failed. The late rank then arrives
// after all, so that MPI can still end cleanly.
TEST(CollectivesTest, ARankThatDoesNotArriveIsNamedWithinTheTimeout) {
  const int me = rank(), size = world_size();
  if (size == 1) GTEST_SKIP() << "needs a second rank";
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  ProcessGroup group = new_group(everyone, std::chrono::seconds(2));
  Tensor warm = all_reduce(full({8}, 1.0), ReduceOp::kSum, group);
  EXPECT_FLOAT_EQ(warm.to_vector<float>()[0], static_cast<float>(size));
  const int late = size - 1;
  if (me == late) {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    all_reduce(full({8}, 1.0), ReduceOp::kSum, group).to_vector<float>();
  } else {
    const auto begin = std::chrono::steady_clock::now();
    try {
      all_reduce(full({8}, 1.0), ReduceOp::kSum, group).to_vector<float>();
      ADD_FAILURE() << "the collective finished without rank " << late;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("all_reduce #2 of process group"));
      EXPECT_THAT(e.what(), HasSubstr(str_cat("rank ", late, " (last started #1) did not arrive")));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(10));
    try {
      all_reduce(full({8}, 1.0), ReduceOp::kSum, group).to_vector<float>();
      ADD_FAILURE() << "a broken group ran a collective";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("is broken"));
    }
  }
  barrier();  // The world is unharmed.
}

}  // namespace
}  // namespace tandem::distributed
