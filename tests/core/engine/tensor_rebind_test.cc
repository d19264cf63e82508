// Note [Rebinding while other threads read] (core/tensor.h): one thread
// assign_s a tensor over and over while others read it, without a lock of
// their own, through every way of reading one. Each read must see one whole
// binding (every element equal to one assigned value), and nothing may
// crash, hang or leave the engine busy. Here, in engine_tests, so that the
// ThreadSanitizer run checks it too.
#include <atomic>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

constexpr int64_t kElements = 64;
// Reads by each of the two threads that only take snapshots, ~0.5 s here;
// the others read a hundredth as often. Before reads took the binding's
// lock, one run in two of 300'000 saw a torn or freed binding, and some
// crashed.
#if defined(__SANITIZE_THREAD__)
constexpr int kReads = 20'000;  // TSan runs ~10x slower.
#else
constexpr int kReads = 1'000'000;
#endif

// True when the `count` values are all the same.
bool whole(const float* values, size_t count = kElements) {
  for (size_t i = 1; i < count; ++i) {
    if (values[i] != values[0]) return false;
  }
  return true;
}
bool whole(const std::vector<float>& values) { return whole(values.data(), values.size()); }

// A new tensor holding `value` in every element, written directly: nothing
// else can see it yet.
Tensor filled(float value) {
  Tensor t = Tensor::empty({kElements});
  for (int64_t i = 0; i < kElements; ++i) t.data<float>()[i] = value;
  return t;
}

// Verifies that readers racing a writer's assign_ see whole values through
// snapshots (read directly and by ops), to_vector, views, and waits. The
// writer frees a storage with every assign_, so a reader that copied a
// binding torn between two values, or one already freed, sees a mix.
TEST(TensorRebindTest, ReadersRacingAssignSeeWholeValues) {
  Tensor shared = filled(0);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread writer([&] {
    for (int k = 1; !stop; ++k) shared.assign_(filled(static_cast<float>(k)));
  });
  auto reader = [&](int way) {
    const int reads = way == 0 ? kReads : kReads / 100;
    for (int i = 0; i < reads; ++i) {
      switch (way) {
        case 0: {
          Tensor pinned = shared.snapshot();
          if (!whole(pinned.data<float>())) ++torn;
          break;
        }
        case 1:
          if (!whole(shared.to_vector<float>())) ++torn;
          break;
        case 2:
          if (!whole(shared.slice(8, 40).reshape({4, 8}).to_vector<float>())) ++torn;
          break;
        case 3: {
          // What an op pushed by another thread does: reads a snapshot.
          Tensor pinned = shared.snapshot();
          current().push(
              [pinned, &torn](const RunContext&) {
                if (!whole(pinned.data<float>())) ++torn;
              },
              Device::cpu(), {pinned.var()}, {}, "reader");
          break;
        }
        case 4:
          shared.wait_to_read();
          EXPECT_EQ(shared.select(0).numel(), 1);
          break;
      }
    }
  };
  std::vector<std::thread> readers;
  for (int way : {0, 0, 1, 2, 3, 4}) readers.emplace_back(reader, way);
  for (std::thread& t : readers) t.join();
  stop = true;
  writer.join();
  current().wait_all();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_TRUE(whole(shared.to_vector<float>()));
}

// Verifies that two threads assigning the same tensor at once leave it
// bound to one whole value, and that a snapshot (a kernel's) refuses to be
// rebound.
TEST(TensorRebindTest, ConcurrentAssignsLeaveOneWholeValue) {
  Tensor shared = filled(0);
  auto assigner = [&](float base) {
    for (int i = 0; i < kReads / 100; ++i) shared.assign_(filled(base + static_cast<float>(i)));
  };
  std::thread a(assigner, 1e6f), b(assigner, 2e6f);
  a.join();
  b.join();
  EXPECT_TRUE(whole(shared.to_vector<float>()));
  TensorImpl frozen(TensorImpl::SnapshotOf{*shared.impl_ptr(), /*frozen=*/true});
  EXPECT_THROW(frozen.rebind(shared.binding()), Error);
  current().wait_all();
}

}  // namespace
}  // namespace tandem::engine::testing
