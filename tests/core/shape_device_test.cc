#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/error.h"
#include "core/shape.h"
#include "tests/error_of.h"

namespace tandem {
namespace {

using tandem::testing::error_of;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// --- Shape --------------------------------------------------------------------------------

struct ShapeRow {
  Shape shape;
  int rank;
  int64_t numel;
  std::vector<int64_t> strides;
  const char* text;
};

// Verifies rank, numel, strides and to_string for scalars, vectors, zero-sized and larger shapes.
TEST(ShapeTest, RankNumelStridesAndText) {
  const ShapeRow rows[] = {
      {Shape{}, 0, 1, {}, "[]"},
      {Shape{5}, 1, 5, {1}, "[5]"},
      {Shape{2, 3, 4}, 3, 24, {12, 4, 1}, "[2, 3, 4]"},
      {Shape{2, 0, 4}, 3, 0, {0, 4, 1}, "[2, 0, 4]"},
      {Shape{0}, 1, 0, {1}, "[0]"},
      {Shape{1, 1, 1, 1, 1, 1, 1, 7}, 8, 7, {7, 7, 7, 7, 7, 7, 7, 1}, "[1, 1, 1, 1, 1, 1, 1, 7]"},
  };
  for (const ShapeRow& row : rows) {
    SCOPED_TRACE(row.text);
    EXPECT_EQ(row.shape.rank(), row.rank);
    EXPECT_EQ(row.shape.numel(), row.numel);
    EXPECT_EQ(row.shape.to_string(), row.text);
    ASSERT_EQ(static_cast<int>(row.strides.size()), row.rank);
    for (int i = 0; i < row.rank; ++i) {
      EXPECT_EQ(row.shape.stride(i), row.strides[i]) << "axis " << i;
      EXPECT_EQ(row.shape.stride(i - row.rank), row.strides[i]) << "axis " << i - row.rank;
    }
  }
}

// Verifies that dim() accepts negative axes and matches operator[] and dims().
TEST(ShapeTest, DimWithNegativeAxes) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_EQ(s.dim(2), 4);
  EXPECT_EQ(s.dim(-1), 4);
  EXPECT_EQ(s.dim(-3), 2);
  EXPECT_EQ(s[1], 3);
  EXPECT_EQ(std::vector<int64_t>(s.begin(), s.end()), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(s.dims().size(), 3u);
}

// Verifies that normalize_axis maps [-rank, rank) and rejects the rest, naming the axis.
TEST(ShapeTest, NormalizeAxisRange) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.normalize_axis(-3), 0);
  EXPECT_EQ(s.normalize_axis(-1), 2);
  EXPECT_EQ(s.normalize_axis(1), 1);
  // Wide axes are checked as they are, not narrowed to int first (2^32 would
  // become axis 0, 2^32 + 1 axis 1).
  for (int64_t bad : {int64_t{3}, int64_t{-4}, int64_t{100}, int64_t{-100}, int64_t{1} << 32,
                      (int64_t{1} << 32) + 1, -(int64_t{1} << 32), kInt64Max,
                      std::numeric_limits<int64_t>::min()}) {
    std::string what = error_of([&] { s.normalize_axis(bad); });
    EXPECT_TRUE(contains(what, str_cat("axis ", bad, " is out of range"))) << what;
    EXPECT_TRUE(contains(what, "[2, 3, 4] of rank 3")) << what;
  }
  EXPECT_THROW(s.dim(int64_t{1} << 32), Error);
  EXPECT_THROW(s.dim(3), Error);
  EXPECT_THROW(s.stride(-4), Error);
  EXPECT_THROW(Shape{}.dim(0), Error);
  EXPECT_THROW(Shape{}.normalize_axis(-1), Error);
}

// Verifies that equality compares dims, including rank.
TEST(ShapeTest, Equality) {
  EXPECT_EQ((Shape{2, 3}), (Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3}) == (Shape{3, 2}));
  EXPECT_FALSE(Shape{} == Shape{1});
  EXPECT_FALSE((Shape{2}) == (Shape{2, 1}));
  std::vector<int64_t> dims{2, 3};
  EXPECT_EQ(Shape(absl::Span<const int64_t>(dims)), (Shape{2, 3}));
  EXPECT_EQ(Shape(absl::Span<const int64_t>()), Shape{});
}

// Verifies that a negative dimension is rejected naming the axis, from either constructor.
TEST(ShapeTest, NegativeDimensionThrowsNamingAxis) {
  std::string what = error_of([] { Shape{2, -1, 3}; });
  EXPECT_TRUE(contains(what, "negative dimension at axis 1")) << what;
  std::vector<int64_t> dims{4, 5, -2};
  what = error_of([&] { Shape{absl::Span<const int64_t>(dims)}; });
  EXPECT_TRUE(contains(what, "negative dimension at axis 2")) << what;
}

// Verifies that an element count beyond int64 is rejected as an overflow.
TEST(ShapeTest, ElementCountOverflowThrows) {
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{
           {int64_t{1} << 32, int64_t{1} << 32},
           {kInt64Max, 2},
           {3, int64_t{1} << 62},
           {int64_t{1} << 21, int64_t{1} << 21, int64_t{1} << 21},
       }) {
    std::string what = error_of([&] { Shape{absl::Span<const int64_t>(dims)}; });
    EXPECT_TRUE(contains(what, "overflow")) << what;
  }
  EXPECT_EQ((Shape{kInt64Max, 1}).numel(), kInt64Max);
  EXPECT_EQ((Shape{int64_t{1} << 31, int64_t{1} << 31}).numel(), int64_t{1} << 62);
}

// Verifies that the overflow check does not depend on where a zero dimension sits: the header
// promises that code may multiply a Shape's dims freely, so dims whose non-zero product overflows
// must be rejected whether the zero comes first or last (stride(0) of {0, 2^40, 2^40} would
// otherwise overflow int64).
TEST(ShapeTest, OverflowCheckIndependentOfZeroPosition) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_THROW((Shape{big, big, 0}), Error);
  EXPECT_THROW((Shape{0, big, big}), Error);
}

struct MulRow {
  int64_t a;
  int64_t b;
  bool overflows;
  int64_t product;
};

// Verifies checked_mul at and around the int64 limit, naming `what` on overflow.
TEST(ShapeTest, CheckedMul) {
  const MulRow rows[] = {
      {0, 0, false, 0},
      {kInt64Max, 0, false, 0},
      {0, kInt64Max, false, 0},
      {kInt64Max, 1, false, kInt64Max},
      {1, kInt64Max, false, kInt64Max},
      {kInt64Max, 2, true, 0},
      {kInt64Max, kInt64Max, true, 0},
      {int64_t{1} << 31, int64_t{1} << 31, false, int64_t{1} << 62},
      {int64_t{1} << 31, int64_t{1} << 32, true, 0},
      {int64_t{1} << 32, int64_t{1} << 31, true, 0},
      {3037000499, 3037000499, false, 3037000499LL * 3037000499LL},
      {3037000500, 3037000500, true, 0},
  };
  for (const MulRow& row : rows) {
    SCOPED_TRACE(str_cat(row.a, " * ", row.b));
    if (row.overflows) {
      std::string what = error_of([&] { checked_mul(row.a, row.b, "widget count"); });
      EXPECT_TRUE(contains(what, "widget count overflows")) << what;
    } else {
      EXPECT_EQ(checked_mul(row.a, row.b, "x"), row.product);
    }
  }
}

struct AddSubRow {
  int64_t a;
  int64_t b;
  bool sum_overflows;
  bool difference_overflows;
};

// Verifies checked_add and checked_sub at and around both int64 limits,
// naming every part of `what` on overflow.
TEST(ShapeTest, CheckedAddAndSub) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const AddSubRow rows[] = {
      {0, 0, false, false},
      {kInt64Max, 0, false, false},
      {kInt64Max, 1, true, false},
      {kInt64Max, -1, false, true},
      {kInt64Max, kInt64Max, true, false},
      {kMin, 0, false, false},
      {kMin, -1, true, false},
      {kMin, 1, false, true},
      {0, kMin, false, true},
      {-1, kMin, true, false},
      {kMin, kMin, true, false},
      {kInt64Max, kMin, false, true},
      {int64_t{1} << 62, int64_t{1} << 62, true, false},
      {(int64_t{1} << 62) - 1, int64_t{1} << 62, false, false},
  };
  for (const AddSubRow& row : rows) {
    SCOPED_TRACE(str_cat(row.a, " and ", row.b));
    if (row.sum_overflows) {
      std::string what = error_of([&] { checked_add(row.a, row.b, "the size of axis ", 2); });
      EXPECT_TRUE(
          contains(what, str_cat("the size of axis 2 overflows int64 (", row.a, " + ", row.b, ")")))
          << what;
    } else {
      EXPECT_EQ(checked_add(row.a, row.b, "x"), row.a + row.b);  // Fits: no overflow here.
    }
    if (row.difference_overflows) {
      std::string what = error_of([&] { checked_sub(row.a, row.b, "an offset"); });
      EXPECT_TRUE(contains(what, str_cat("an offset overflows int64 (", row.a, " - ", row.b, ")")))
          << what;
    } else {
      EXPECT_EQ(checked_sub(row.a, row.b, "x"), row.a - row.b);
    }
  }
}

// --- Device -------------------------------------------------------------------------------

// Verifies parsing of the accepted spellings and the to_string round trip.
TEST(DeviceTest, ParseAndToStringRoundTrip) {
  struct Row {
    const char* text;
    Device device;
    const char* canonical;
  };
  const Row rows[] = {
      {"cpu", Device::cpu(), "cpu"},
      {"cuda", Device::cuda(0), "cuda:0"},
      {"cuda:0", Device::cuda(0), "cuda:0"},
      {"cuda:3", Device::cuda(3), "cuda:3"},
      {"cuda:17", Device(DeviceType::kCUDA, 17), "cuda:17"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.text);
    Device d = Device::parse(row.text);
    EXPECT_EQ(d, row.device);
    EXPECT_EQ(d.to_string(), row.canonical);
    EXPECT_EQ(Device::parse(d.to_string()), d);
  }
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  EXPECT_TRUE(Device::parse("cuda:3").is_cuda());
  EXPECT_EQ(Device::parse("cuda:3").index(), 3);
  EXPECT_EQ(Device::parse("cuda:3").type(), DeviceType::kCUDA);
  EXPECT_EQ(Device(), Device::cpu());
  EXPECT_FALSE(Device::cuda(0) == Device::cuda(1));
  EXPECT_FALSE(Device::cpu() == Device::cuda(0));
}

// Verifies that malformed device names throw a tandem::Error quoting the text.
TEST(DeviceTest, ParseRejectsMalformedNames) {
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", "", "cuda:+1", " cpu",
                          "cuda:1 ", "cpu:0", "cuda:99999999999"}) {
    SCOPED_TRACE(bad);
    std::string what = error_of([&] { Device::parse(bad); });
    EXPECT_TRUE(contains(what, str_cat("'", bad, "'"))) << what;
  }
}

}  // namespace
}  // namespace tandem
