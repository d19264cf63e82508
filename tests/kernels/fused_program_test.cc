// kernels/fused_program.h: the parsed form of a fused_elementwise program
// that the CPU and CUDA kernels both run. The op's rows and error messages
// are in fused_elementwise_test.cc.
#include "kernels/fused_program.h"

#include "gtest/gtest.h"

#include "kernels/elementwise_ops.h"

namespace tandem::kernels {
namespace {

// Verifies that each instruction carries its op, operands and parameters,
// parameters in the table's order whatever the text's order.
TEST(FusedProgramTest, ParsesOpsOperandsAndParameters) {
  FusedProgram p = parse_fused_program("r0=exp(i1);r1=clip(r0,max=6,min=-1);r2=mul(r1,i0)", 2);
  ASSERT_EQ(p.instrs.size(), 3u);
  EXPECT_EQ(p.instrs[0].code, elementwise::ElementwiseOps::code_of<elementwise::Exp>());
  EXPECT_EQ(p.instrs[0].arity, 1);
  EXPECT_TRUE(p.instrs[0].operands[0].is_input);
  EXPECT_EQ(p.instrs[0].operands[0].index, 1);
  EXPECT_EQ(p.instrs[1].code, elementwise::ElementwiseOps::code_of<elementwise::Clip>());
  EXPECT_FALSE(p.instrs[1].operands[0].is_input);
  EXPECT_EQ(p.instrs[1].operands[0].index, 0);
  EXPECT_EQ(p.instrs[1].params[0], -1);
  EXPECT_EQ(p.instrs[1].params[1], 6);
  EXPECT_EQ(p.instrs[2].code, elementwise::ElementwiseOps::code_of<elementwise::Mul>());
  EXPECT_EQ(p.instrs[2].arity, 2);
  EXPECT_EQ(p.instrs[2].operands[1].index, 0);
  EXPECT_TRUE(p.instrs[2].operands[1].is_input);
  EXPECT_TRUE(p.costly);
}

// Verifies that a chain needs two slots: a register takes a slot before its
// operand's is freed, and the output has none.
TEST(FusedProgramTest, ReusesSlotsAfterTheLastReader) {
  FusedProgram p = parse_fused_program("r0=neg(i0);r1=neg(r0);r2=neg(r1);r3=neg(r2)", 1);
  EXPECT_EQ(p.slot, (std::vector<int>{0, 1, 0, -1}));
  EXPECT_EQ(p.num_slots, 2);
  EXPECT_FALSE(p.costly);
}

// Verifies that the per-thread cache hands back the program it parsed last.
TEST(FusedProgramTest, CachesTheLastProgram) {
  auto first = cached_fused_program("r0=abs(i0)", 1);
  EXPECT_EQ(cached_fused_program("r0=abs(i0)", 1), first);
  EXPECT_NE(cached_fused_program("r0=sign(i0)", 1), first);
}

}  // namespace
}  // namespace tandem::kernels
