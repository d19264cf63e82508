// Elementwise fusion: a group of elementwise nodes becomes one
// fused_elementwise node (kernels/ops/fused_elementwise.cc), which reads each
// input element once and writes each output element once, instead of every
// node reading and writing a whole tensor.
//
//   %1 = exp(%0); %2 = mul(%1, %s); %3 = relu(%2)        # s: float32[]
//   becomes
//   %3 = fused_elementwise(%0, %s) {program="r0=exp(i0);r1=mul(r0,i1);r2=relu(r1)"}
//
// A group is a set of nodes of the fusable ops (the float unary and binary
// elementwise ops that fused_elementwise knows: neg, abs, sign, square,
// relu, exp, log, sqrt, rsqrt, tanh, sigmoid, erf, gelu, leaky_relu, clip,
// add, sub, mul, div, pow, maximum, minimum) that
//   - all write values of one shape and one floating dtype (float32, float64),
//   - read only values of that shape or one-element scalars (a binary op that
//     broadcasts anything else is not fused),
//   - and have one result leaving the group: every other node's output is
//     read only by nodes of the group and is not a graph output.
// Groups are maximal and at least two nodes; chains and diamonds fuse alike.
// The fused node takes the place and the source location of the group's
// last node, and writes the same value, so readers and outputs need no
// rewiring. Results are bit-for-bit those of the unfused nodes (the kernel
// uses the same scalar math).
#pragma once

#include <string_view>

#include "trace/graph.h"
#include "trace/passes/pass.h"

namespace tandem::trace {

// Counts the nodes removed (a group of n nodes removes n - 1).
class ElementwiseFusion final : public Pass {
 public:
  std::string_view name() const override { return "elementwise_fusion"; }
  int run(Graph& graph) override;
};

}  // namespace tandem::trace
