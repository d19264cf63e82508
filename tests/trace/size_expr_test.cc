// SizeExpr: the expressions free dimensions' sizes are written in, read
// from files that may be hostile (trace/size_expr.h); the search for floor
// divisions (trace/size_search.h); and the probe plan.
#include "trace/size_expr.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/error_of.h"
#include "trace/size_search.h"
#include "trace/symbolic_shapes.h"

namespace tandem::trace {
namespace {

using tandem::testing::error_of;
using ::testing::HasSubstr;

TEST(SizeExpr, ReadsWritesAndEvaluatesPolynomials) {
  const SymbolValues at{{"batch", 8}, {"seq", 100}};
  struct Case {
    std::string text, canonical;
    int64_t value;
  };
  for (const Case& c : {Case{"batch*seq", "batch*seq", 800}, Case{"seq * batch", "batch*seq", 800},
                        Case{"seq - 1", "seq - 1", 99}, Case{"-seq + 3", "-seq + 3", -97},
                        Case{"2*batch*seq + seq - 1 + 1", "2*batch*seq + seq", 1700},
                        Case{"seq*seq", "seq*seq", 10000}, Case{"batch - batch", "0", 0},
                        Case{"  42 ", "42", 42}, Case{"3*4*batch", "12*batch", 96}}) {
    SCOPED_TRACE(c.text);
    const SizeExpr e = SizeExpr::parse(c.text, "test");
    EXPECT_EQ(e.to_string(), c.canonical);
    EXPECT_EQ(SizeExpr::parse(e.to_string(), "test"), e);
    EXPECT_EQ(e.evaluate(at, "test"), c.value);
  }
  EXPECT_EQ(SizeExpr::parse("seq", "t").as_symbol(), "seq");
  EXPECT_EQ(SizeExpr::parse("2*seq", "t").as_symbol(), "");
  EXPECT_TRUE(SizeExpr::parse("7", "t").is_constant());
  EXPECT_EQ(SizeExpr::parse("batch*seq + seq", "t").symbols(),
            (std::vector<std::string>{"batch", "seq"}));
}

// Verifies floor divisions against a loop of floor(e / d) over many values,
// their canonical form (what the divisor divides moved out, so that
// equal divisions print alike) and the round trip through text.
TEST(SizeExpr, FloorDivisionsAgreeWithALoop) {
  const SizeExpr seq = SizeExpr::symbol("seq");
  const SizeExpr batch = SizeExpr::symbol("batch");
  struct Case {
    SizeExpr e;
    std::string canonical;
    int64_t (*reference)(int64_t batch, int64_t seq);
  };
  auto floor_of = [](int64_t a, int64_t d) {
    return static_cast<int64_t>(std::floor(static_cast<double>(a) / static_cast<double>(d)));
  };
  static decltype(floor_of) f = floor_of;
  const std::vector<Case> cases = {
      {SizeExpr::floor_div(seq + SizeExpr::constant(-1), 2) + SizeExpr::constant(1),
       "floordiv(seq + 1, 2)", [](int64_t, int64_t s) { return f(s - 1, 2) + 1; }},
      {SizeExpr::floor_div(SizeExpr::constant(3) * seq + SizeExpr::constant(7), 2),
       "floordiv(seq + 1, 2) + seq + 3", [](int64_t, int64_t s) { return f(3 * s + 7, 2); }},
      {batch * SizeExpr::floor_div(seq, 4), "batch*floordiv(seq, 4)",
       [](int64_t b, int64_t s) { return b * f(s, 4); }},
      {SizeExpr::floor_div(SizeExpr::floor_div(seq + SizeExpr::constant(-3), 2), 3),
       "floordiv(floordiv(seq + 1, 2) + 1, 3) - 1",
       [](int64_t, int64_t s) { return f(f(s - 3, 2), 3); }},
      {SizeExpr::floor_div(SizeExpr::constant(4) * seq, 2), "2*seq",
       [](int64_t, int64_t s) { return 2 * s; }},
      {SizeExpr::floor_div(SizeExpr::constant(-7), 2), "-4",
       [](int64_t, int64_t) { return int64_t{-4}; }},
      {SizeExpr::floor_div(seq, 1), "seq", [](int64_t, int64_t s) { return s; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.canonical);
    EXPECT_EQ(c.e.to_string(), c.canonical);
    const SizeExpr read = SizeExpr::parse(c.e.to_string(), "test");
    EXPECT_EQ(read, c.e);
    for (int64_t b = 0; b <= 3; ++b) {
      for (int64_t s = -9; s <= 40; ++s) {
        EXPECT_EQ(read.evaluate({{"batch", b}, {"seq", s}}, "test"), c.reference(b, s))
            << "batch " << b << ", seq " << s;
      }
    }
  }
  EXPECT_EQ(SizeExpr::parse("floordiv(2*seq + batch, 3)", "t").symbols(),
            (std::vector<std::string>{"batch", "seq"}));
  EXPECT_EQ(SizeExpr::parse("floordiv(seq, 2)", "t").as_symbol(), "");
  EXPECT_EQ(SizeExpr::parse("floordiv( seq + 5 , 2 )", "t").to_string(),
            "floordiv(seq + 1, 2) + 2");
  // A dimension may still be called floordiv.
  EXPECT_EQ(SizeExpr::parse("floordiv + 1", "t").evaluate({{"floordiv", 2}}, "t"), 3);
}

// Verifies that the search finds a strided output's length times a batch
// (skipping sizes the oracle refuses), a stack of two strides, and nothing
// for a size of no such form.
TEST(SizeSearch, FindsFloorDivisionsAndNothingElse) {
  const SymbolValues example{{"batch", 3}, {"len", 20}}, last{{"batch", 16}, {"len", 40}};
  const auto strided = [](const SymbolValues& at) -> std::optional<int64_t> {
    const int64_t len = at.at("len");
    if (len < 3) return std::nullopt;  // The kernel is wider than the input.
    return at.at("batch") * ((len - 3) / 2 + 1);
  };
  std::optional<SizeExpr> found = search_size(strided, example, last);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->to_string(), "batch*floordiv(len + 1, 2) - batch");
  const auto stack = [](const SymbolValues& at) -> std::optional<int64_t> {
    const int64_t first = (at.at("len") + 2 - 3) / 2 + 1;
    return first < 5 ? std::nullopt : std::optional<int64_t>((first - 5) / 3 + 1);
  };
  found = search_size(stack, example, last);
  ASSERT_TRUE(found.has_value());
  for (int64_t len = 9; len <= 40; ++len) {
    EXPECT_EQ(found->evaluate({{"batch", 1}, {"len", len}}, "t"),
              *stack({{"batch", 1}, {"len", len}}));
  }
  const auto square = [](const SymbolValues& at) -> std::optional<int64_t> {
    return at.at("len") * at.at("len");
  };
  EXPECT_FALSE(search_size(square, example, last).has_value());
  const auto by_parity = [](const SymbolValues& at) -> std::optional<int64_t> {
    return at.at("len") % 2 == 0 ? at.at("len") : 1;
  };
  EXPECT_FALSE(search_size(by_parity, example, last).has_value());
}

TEST(SizeExpr, RefusesBadTextWithThePosition) {
  EXPECT_THAT(error_of([] { SizeExpr::parse("seq +", "in the file"); }),
              HasSubstr("in the file: bad size expression 'seq +' at byte 5: expected a number"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("seq / 2", "f"); }),
              HasSubstr("at byte 4: unexpected character"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("9223372036854775808", "f"); }),
              HasSubstr("does not fit in int64"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("", "f"); }), HasSubstr("expected a number"));
  EXPECT_THAT(error_of([] { SizeExpr::parse(std::string(65, 'a'), "f"); }),
              HasSubstr("longer than 64 bytes"));
  std::string many = "a";
  for (int i = 0; i < 64; ++i) many += " + a";
  EXPECT_THAT(error_of([] { SizeExpr::parse("a*a*a*a*a*a*a*a*a", "f"); }),
              HasSubstr("more than 8 names"));
  EXPECT_THAT(error_of([&] { SizeExpr::parse(many, "f"); }), HasSubstr("more than 64 terms"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("floordiv(seq, 0)", "f"); }),
              HasSubstr("at byte 15: floordiv's divisor must be at least 1"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("floordiv(seq)", "f"); }),
              HasSubstr("expected ',' and floordiv's divisor"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("floordiv(seq, n)", "f"); }),
              HasSubstr("expected floordiv's divisor, a positive integer"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("floordiv(seq, 2", "f"); }),
              HasSubstr("expected ')' after floordiv's divisor"));
  std::string deep = "seq";
  for (int i = 0; i < 9; ++i) deep = "floordiv(" + deep + " + 1, 2)";
  EXPECT_THAT(error_of([&] { SizeExpr::parse(deep, "f"); }), HasSubstr("nest more than 8 deep"));
  EXPECT_THAT(error_of([] { SizeExpr::floor_div(SizeExpr::symbol("n"), -2); }),
              HasSubstr("a divisor must be at least 1"));
}

TEST(SizeExpr, OverflowIsAnErrorNeverAWrap) {
  const SizeExpr big = SizeExpr::parse("4611686018427387904*n", "t");  // 2^62 * n
  EXPECT_EQ(big.evaluate({{"n", 1}}, "t"), int64_t{1} << 62);
  EXPECT_THAT(error_of([&] {
                big.evaluate({{"n", 2}}, "the node");
              }),
              HasSubstr("overflows int64"));
  EXPECT_THAT(error_of([&] { big.evaluate({}, "the node"); }),
              HasSubstr("uses dimension 'n', which has no value"));
  EXPECT_THAT(error_of([] { SizeExpr::parse("9223372036854775807 + 1", "t"); }),
              HasSubstr("overflows int64"));
  const SizeExpr lowest = SizeExpr::constant(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(lowest.to_string(), "-9223372036854775808");
}

// The grid moves each name by one on its own (down from 4 and up, up from
// below, so that no probe is a broadcasting 1), the check points all names
// by two, five and seventeen.
TEST(ProbePlan, AFullGridAndCheckPoints) {
  const ProbePlan plan = plan_probes({{"batch", 2}, {"seq", 16}});
  ASSERT_EQ(plan.symbols, (std::vector<std::string>{"batch", "seq"}));
  ASSERT_EQ(plan.points.size(), 7u);
  EXPECT_EQ(values_text(plan.points[0]), "batch = 2, seq = 16");
  EXPECT_EQ(values_text(plan.points[1]), "batch = 3, seq = 16");
  EXPECT_EQ(values_text(plan.points[2]), "batch = 2, seq = 15");
  EXPECT_EQ(values_text(plan.points[3]), "batch = 3, seq = 15");
  EXPECT_EQ(values_text(plan.points[4]), "batch = 4, seq = 14");
  EXPECT_EQ(plan.first_extra_check(), 5u);
  EXPECT_EQ(values_text(plan.points[5]), "batch = 7, seq = 11");
  EXPECT_EQ(values_text(plan.points[6]), "batch = 19, seq = 33");
  EXPECT_THAT(error_of([] {
                plan_probes({{"a", 2}, {"b", 2}, {"c", 2}, {"d", 2}, {"e", 2}});
              }),
              HasSubstr("at most 4 named free dimensions"));
}

}  // namespace
}  // namespace tandem::trace
