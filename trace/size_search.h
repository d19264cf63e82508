// Finding the expression of a size from its values (trace/symbolic_shapes.h).
//
//   SizeOracle length = [&](const SymbolValues& at) { ... };   // e.g. shape inference
//   std::optional<SizeExpr> e = search_size(length, {{"seq", 100}}, {{"seq", 200}});
//   e->to_string();   // "floordiv(seq + 1, 2)" for a stride-2 convolution's output
//
// A trace sees a size at a few values of the free dimensions only, and a
// size that moves in steps (a strided convolution's or pooling's output
// length, floor((seq + 2p - k) / s) + 1) matches no polynomial there. Where
// the size can be computed at any values (by the ops' shape inference, no
// tracing), it is sampled along each dimension alone, from 1 to `last`, and
// each dimension's part is taken to be affine in the dimension itself or in
// one floor division floor((a*x + r) / d), d <= 16, a < d, found by trying
// them in order; the whole is then the multilinear polynomial in those
// parts through a grid of corners where each part moves by one, checked at
// every sample and at random points. What fits no such form is not found:
// the caller refuses it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "trace/size_expr.h"

namespace tandem::trace {

// The size at `values`, or nullopt where there is none (the ops refuse
// those sizes): such points are skipped.
using SizeOracle = std::function<std::optional<int64_t>(const SymbolValues& values)>;

// The expression of the size `size_at` computes, sampled around `example`
// (a value for every free dimension) up to `last` (the same names), or
// nullopt when no expression of the form above gives every sample.
std::optional<SizeExpr> search_size(const SizeOracle& size_at, const SymbolValues& example,
                                    const SymbolValues& last);

}  // namespace tandem::trace
