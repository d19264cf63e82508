// SizeExpr: the polynomials free dimensions' sizes are written in, read
// from files that may be hostile (trace/size_expr.h); and the probe plan.
#include "trace/size_expr.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/error_of.h"
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
// below, so that no probe is a broadcasting 1), and the last point by two.
TEST(ProbePlan, AFullGridAndACheckPoint) {
  const ProbePlan plan = plan_probes({{"batch", 2}, {"seq", 16}});
  ASSERT_EQ(plan.symbols, (std::vector<std::string>{"batch", "seq"}));
  ASSERT_EQ(plan.points.size(), 5u);
  EXPECT_EQ(values_text(plan.points[0]), "batch = 2, seq = 16");
  EXPECT_EQ(values_text(plan.points[1]), "batch = 3, seq = 16");
  EXPECT_EQ(values_text(plan.points[2]), "batch = 2, seq = 15");
  EXPECT_EQ(values_text(plan.points[3]), "batch = 3, seq = 15");
  EXPECT_EQ(values_text(plan.points[4]), "batch = 4, seq = 14");
  EXPECT_THAT(error_of([] {
                plan_probes({{"a", 2}, {"b", 2}, {"c", 2}, {"d", 2}, {"e", 2}});
              }),
              HasSubstr("at most 4 named free dimensions"));
}

}  // namespace
}  // namespace tandem::trace
