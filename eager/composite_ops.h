// Ops written as compositions of the registry's ops: masked_fill,
// logsumexp, tril / triu (and tril_mask), flip, roll, tile, max_unpool2d,
// conv1d, conv_transpose1d and conv3d, with torch's semantics.
//
//   Tensor scores = masked_fill(scores, padding, -INFINITY);
//   Tensor lse = logsumexp(logits, {-1});
//   Tensor causal = tril(ones({4, 4}));
//
// Note [Composite ops]
// Each is a few registry ops (where, take, concat, slice, max, sum...), so
// gradients, hybridize, export and every device come from those ops and a
// traced graph holds them like a hand-written composition. A dedicated
// kernel would save passes; none of these is hot in the models Tandem runs
// today. Axes may be negative (-1 is the last); an axis out of range, or
// listed twice, is a tandem::Error naming the function, the axis and the
// shape.
#pragma once

#include <cstdint>
#include <source_location>

#include "core/tensor.h"
#include "eager/ops.h"

namespace tandem {

// x where `mask` is false, `value` where it is true (mask: bool,
// broadcastable to x's shape).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value,
                   std::source_location where = std::source_location::current());

// log(sum(exp(x))) over `axes` (all when empty), computed around the
// maximum so that large values do not overflow; -inf where every element is
// -inf, as torch.logsumexp.
Tensor logsumexp(const Tensor& x, const Dims& axes = {}, bool keepdims = false,
                 std::source_location where = std::source_location::current());

// The lower (tril) or upper (triu) triangle of the last two axes, the rest
// zero: element (i, j) is kept when j - i <= diagonal (tril) or j - i >=
// diagonal (triu), as torch.tril / torch.triu.
Tensor tril(const Tensor& x, int64_t diagonal = 0,
            std::source_location where = std::source_location::current());
Tensor triu(const Tensor& x, int64_t diagonal = 0,
            std::source_location where = std::source_location::current());
// The bool [rows, cols] mask tril keeps: true where j - i <= diagonal (at
// diagonal 0, the causal mask of attention: query i sees keys 0..i).
Tensor tril_mask(int64_t rows, int64_t cols, int64_t diagonal = 0, Device device = Device::cpu(),
                 std::source_location where = std::source_location::current());

// x with the order of its elements reversed along each of `axes`.
Tensor flip(const Tensor& x, const Dims& axes,
            std::source_location where = std::source_location::current());

// x shifted by `shift` positions along `axis`, elements leaving one end
// entering at the other (any shift, negative included, as torch.roll).
Tensor roll(const Tensor& x, int64_t shift, int64_t axis,
            std::source_location where = std::source_location::current());

// x repeated reps[i] times along axis i, as torch's Tensor.repeat and
// NumPy's tile (reps has one entry per axis; each >= 1).
Tensor tile(const Tensor& x, const Dims& reps,
            std::source_location where = std::source_location::current());

// max_pool2d's inverse, as torch's F.max_unpool2d: zeros of [N, C, H, W]
// with each value of x [N, C, h, w] put back at its position in `indices`
// (int64, x's shape: offsets within the output plane, iy * W + ix, as
// max_pool2d_with_indices gives them). [H, W] is output_size when given,
// else (in - 1) * stride - 2 * padding + kernel per axis (stride defaults
// to kernel). It is a scatter into each flattened plane, so indices follow
// the index ops' rule (negative ones count from the end; one out of range
// is an Error from that scatter, naming the index and the plane's size),
// and where two values name one position the later one in row-major order
// stays; both get that position's gradient, as in torch.
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Dims& kernel,
                    const Dims& stride = {}, const Dims& padding = {0, 0},
                    const Dims& output_size = {},
                    std::source_location where = std::source_location::current());

// The 1-d convolutions, as torch's F.conv1d (weight [out, in / groups, k])
// and F.conv_transpose1d (weight [in, out / groups, k]) over x [N, C, L]:
// the 2-d op over a height of 1 (x viewed as [N, C, 1, L], the weight with
// a kernel height of 1, nothing strided or padded along it), so their
// gradients, fusion and export are the 2-d op's. Errors name the 1-d call.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1,
              std::source_location where = std::source_location::current());
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                        int64_t groups = 1, int64_t dilation = 1,
                        std::source_location where = std::source_location::current());

// The 3-d convolution, as torch's F.conv3d: x [N, C, D, H, W], weight [out,
// in / groups, kD, kH, kW], bias [out]; stride, padding and dilation give
// (depth, height, width). One conv2d over depth slices stacked into
// channels: the kD slices of the (depth-padded) input that the kernel's
// depth taps read are laid side by side as channels of an [N * D', kD * C,
// H, W] input, the weight rearranged to match, so the 2-d op's kernels,
// gradient and export serve it; the input is copied kD times on the way.
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Dims& stride = {1, 1, 1}, const Dims& padding = {0, 0, 0},
              const Dims& dilation = {1, 1, 1}, int64_t groups = 1,
              std::source_location where = std::source_location::current());

}  // namespace tandem
