// The program of a fused_elementwise node, parsed: the op codes, the
// instructions and the scratch layout that both its CPU kernel
// (kernels/ops/fused_elementwise.cc) and its CUDA kernel
// (kernels/cuda/elementwise.cu) run. The text is that of Note [Fused
// elementwise programs] in kernels/ops/fused_elementwise.cc:
//
//   FusedProgram p = parse_fused_program("r0=exp(i0);r1=clip(r0,max=6,min=0)", 1);
//   p.instrs[1].code;                      // code_of<elementwise::Clip>()
//   p.instrs[1].operands[0];               // {.is_input = false, .index = 0}: r0
//   p.instrs[1].params;                    // {0, 6}: min, max
//
// Plain C++ with light includes: nvcc compiles it into the CUDA kernels.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/elementwise_formula.h"

namespace tandem::kernels {

// An instruction's operand: the node's input iN or the register rM.
struct FusedOperand {
  bool is_input = false;
  int index = 0;
};

struct FusedInstr {
  ElementwiseOp code;                    // The op's index in elementwise::ElementwiseOps.
  int arity;                             // 1 or 2 operands.
  std::array<FusedOperand, 2> operands;  // operands[1] unused when arity is 1.
  std::array<double, 2> params = {0, 0};
};

// A parsed program with its scratch layout for the CPU's block loops: each
// register that is not the output gets a slot of one block, and slots are
// reused once a register's last reader has run. A register's slot differs
// from its operands' slots, so an instruction never reads what it writes.
struct FusedProgram {
  std::vector<FusedInstr> instrs;  // instrs[k] defines rk; the last is the output.
  std::vector<int> slot;           // Per register; -1 for the output.
  int num_slots = 0;
  bool costly = false;  // Some instruction calls libm per element.
};

// Parses `text` for a node with `num_inputs` inputs. Throws tandem::Error
// naming the instruction at fault if the text breaks Note [Fused elementwise
// programs]: a malformed or misnumbered instruction, an unknown op, a wrong
// operand or parameter, clip's min above max, or an input never read.
FusedProgram parse_fused_program(std::string_view text, int num_inputs);

// parse_fused_program through a one-entry cache per thread: engine workers
// run the same few programs over and over. The program stays valid while
// the caller holds it.
std::shared_ptr<const FusedProgram> cached_fused_program(const std::string& text, int num_inputs);

}  // namespace tandem::kernels
