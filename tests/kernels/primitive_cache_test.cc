// kernels/cpu/primitive_cache.h: a primitive is made once per operation and
// reused, operations that differ in any descriptor byte or in the fused
// activation get their own, each thread has its own primitives, and the
// cache keeps only the most recently used.
#include "kernels/cpu/primitive_cache.h"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

#include "core/error.h"

namespace tandem::kernels::onednn {
namespace {

// A matmul of [m, k] by [k, n]; `made` counts the descriptors made.
std::shared_ptr<const CachedPrimitive<dnnl::matmul>> product(int64_t m, int64_t k, int64_t n,
                                                             int& made,
                                                             const FusedActivation& act = {}) {
  using tag = dnnl::memory::format_tag;
  const dnnl::matmul::desc op(desc({m, k}, tag::ab), desc({k, n}, tag::ab), desc({m, n}, tag::ab));
  return cached_primitive<dnnl::matmul>("matmul", PrimitiveKey().add(op.data).add(act), [&] {
    ++made;
    return dnnl::matmul::primitive_desc(op, post_op_attr(act), cpu_engine());
  });
}

// Verifies that the same operation is made once and then found.
TEST(PrimitiveCacheTest, MakesEachOperationOnce) {
  int made = 0;
  auto first = product(3, 5, 7, made);
  auto again = product(3, 5, 7, made);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(first.get(), again.get());
  EXPECT_EQ(first->pd.dst_desc().dims(), (dnnl::memory::dims{3, 7}));
}

// Verifies that other shapes, or another fused activation, are other entries.
TEST(PrimitiveCacheTest, TellsOperationsApart) {
  int made = 0;
  auto plain = product(4, 6, 8, made);
  auto wider = product(4, 6, 9, made);
  auto relu = product(4, 6, 8, made,
                      fused_activation({{"activation", std::string("relu")}, {"alpha", 0.0}}));
  auto leaky = product(
      4, 6, 8, made, fused_activation({{"activation", std::string("leaky_relu")}, {"alpha", 0.1}}));
  EXPECT_EQ(made, 4);
  EXPECT_NE(plain.get(), wider.get());
  EXPECT_NE(plain.get(), relu.get());
  EXPECT_NE(relu.get(), leaky.get());
}

// Verifies that another thread gets a primitive of its own for the same
// operation (Note [Primitive cache]: two threads must never run one
// primitive object at once), and finds it again.
TEST(PrimitiveCacheTest, EachThreadHasItsOwnPrimitive) {
  int made = 0;
  auto mine = product(5, 6, 7, made);
  std::shared_ptr<const CachedPrimitive<dnnl::matmul>> theirs, theirs_again;
  std::thread([&] {
    theirs = product(5, 6, 7, made);
    theirs_again = product(5, 6, 7, made);
  }).join();
  EXPECT_EQ(made, 2);
  EXPECT_NE(mine.get(), theirs.get());
  EXPECT_EQ(theirs.get(), theirs_again.get());
  EXPECT_EQ(product(5, 6, 7, made).get(), mine.get());
}

// Verifies that the cache holds kPrimitiveCacheEntries operations: filling it
// with new ones evicts the least recently used, which is made again, while
// an entry still held stays usable.
TEST(PrimitiveCacheTest, EvictsTheLeastRecentlyUsed) {
  int made = 0;
  auto held = product(2, 3, 4, made);
  for (int64_t n = 1; n <= static_cast<int64_t>(kPrimitiveCacheEntries); ++n) {
    product(1, 1, 1000 + n, made);
  }
  const int before = made;
  product(2, 3, 4, made);
  EXPECT_EQ(made, before + 1) << "the oldest entry was not evicted";
  product(1, 1, 1000 + static_cast<int64_t>(kPrimitiveCacheEntries), made);
  EXPECT_EQ(made, before + 1) << "a recent entry was evicted";
  EXPECT_EQ(held->pd.dst_desc().dims(), (dnnl::memory::dims{2, 4}));
}

// Verifies that an entry another thread evicts is destroyed on the thread
// that made it, the next time that thread looks in the cache (Note
// [Primitive cache]: oneDNN counts a primitive's scratchpad users per
// thread, so destroying it elsewhere freed the other thread's buffer).
TEST(PrimitiveCacheTest, EvictedEntriesDieOnTheirOwnThread) {
  struct Destroyed {
    std::atomic<bool> done{false};
    std::atomic<uint64_t> on_thread{0};
  };
  auto destroyed = std::make_shared<Destroyed>();
  uint64_t owner = 0;
  auto keep_marked = [&] {
    owner = this_thread_number();
    keep_cached_primitive("evicted-entry-of-another-thread",
                          std::shared_ptr<const void>(new int(0), [destroyed](const int* p) {
                            destroyed->on_thread = this_thread_number();
                            destroyed->done = true;
                            delete p;
                          }));
  };
  std::thread owner_thread;
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;  // 1: the owner kept its entry; 2: evicted elsewhere; 3: the owner looked.
  auto advance_to = [&](int next) {
    std::lock_guard lock(mu);
    step = next;
    cv.notify_all();
  };
  auto wait_for = [&](int wanted) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return step >= wanted; });
  };
  owner_thread = std::thread([&] {
    keep_marked();
    advance_to(1);
    wait_for(2);
    find_cached_primitive("a key nobody keeps");
    advance_to(3);
  });
  wait_for(1);
  for (size_t n = 0; n < kPrimitiveCacheEntries; ++n) {
    keep_cached_primitive(str_cat("filler-", n), std::make_shared<int>(0));
  }
  EXPECT_FALSE(destroyed->done) << "destroyed by the thread that evicted it";
  advance_to(2);
  wait_for(3);
  owner_thread.join();
  EXPECT_TRUE(destroyed->done);
  EXPECT_EQ(destroyed->on_thread, owner);
}

}  // namespace
}  // namespace tandem::kernels::onednn
