#include "core/engine/inline_function.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

using Small = InlineFunction<int(int), 32>;

// Counts live copies, to check that captures are destroyed exactly once.
struct Counted {
  static inline int live = 0;
  Counted() { ++live; }
  Counted(const Counted&) { ++live; }
  Counted(Counted&&) noexcept { ++live; }
  ~Counted() { --live; }
};

// Verifies that a small closure is called with its arguments and captures.
TEST(InlineFunctionTest, CallsSmallClosure) {
  int base = 10;
  Small f = [base](int x) { return base + x; };
  EXPECT_TRUE(static_cast<bool>(f));
  EXPECT_EQ(f(5), 15);
}

// Verifies that a closure larger than the inline buffer still works.
TEST(InlineFunctionTest, CallsLargeClosure) {
  std::array<int, 64> big{};
  big[63] = 7;
  static_assert(!Small::fits_inline<decltype([big](int) { return big[63]; })>());
  Small f = [big](int x) { return big[63] * x; };
  EXPECT_EQ(f(3), 21);
}

// Verifies that moving transfers the closure and empties the source.
TEST(InlineFunctionTest, MoveTransfers) {
  Small f = [s = std::string("hello")](int) { return static_cast<int>(s.size()); };
  Small g = std::move(f);
  EXPECT_FALSE(static_cast<bool>(f));  // NOLINT(bugprone-use-after-move): checking the contract.
  EXPECT_EQ(g(0), 5);
  Small h;
  h = std::move(g);
  EXPECT_EQ(h(0), 5);
}

// Verifies that captured objects are destroyed exactly once, inline or not,
// by reset, by destruction and by move-assignment over a held closure.
TEST(InlineFunctionTest, DestroysCapturesOnce) {
  ASSERT_EQ(Counted::live, 0);
  {
    Small inline_f = [c = Counted()](int) { return 1; };
    InlineFunction<int(int), 8> heap_f = [c = Counted(), pad = std::array<char, 64>{}](int) {
      return 2;
    };
    EXPECT_EQ(Counted::live, 2);
    Small moved = std::move(inline_f);
    EXPECT_EQ(Counted::live, 2);
    moved.reset();
    EXPECT_EQ(Counted::live, 1);
    moved = [c = Counted()](int) { return 3; };
    moved = [](int) { return 4; };
    EXPECT_EQ(Counted::live, 1);
  }
  EXPECT_EQ(Counted::live, 0);
}

// Verifies that a move-only capture is accepted.
TEST(InlineFunctionTest, AcceptsMoveOnlyCaptures) {
  Small f = [p = std::make_unique<int>(9)](int) { return *p; };
  EXPECT_EQ(f(0), 9);
}

}  // namespace
}  // namespace tandem::engine
