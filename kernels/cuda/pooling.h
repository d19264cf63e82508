// The pooling ops' device code, for conv_pool.cc: max_pool2d, avg_pool2d,
// adaptive_avg_pool2d and their backward ops over NCHW planes.
//
//   PoolGeometry g{.planes = N * C, .y = {H, OH, kH, sH, pH}, .x = {W, OW, kW, sW, pW}};
//   pooling::max_pool2d<float>(g, x, y, /*argmax=*/nullptr, stream);
//
// Our own kernels rather than cuDNN's, because the CPU conventions
// (kernels/ops/conv_pool.cc) are the contract: max_pool2d_backward gets
// (x, grad_y), not cuDNN's (x, y, grad_y), and sends each window's gradient
// to its first maximum in row-major order (NaN winning), where cuDNN breaks
// ties its own way; and the backward passes gather, each input element
// summing the windows that cover it in the CPU's order, so they need no
// atomics and give the CPU's sums bit for bit.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tandem::kernels::cuda::pooling {

// The windows along one axis: `in` input positions, `out` windows. Fixed
// windows start every `stride` from -`padding` and read `kernel` positions
// `dilation` apart (max pooling's; 1 for average pooling); adaptive windows
// (kernel 0) are [floor(o in / out), ceil((o + 1) in / out)).
struct PoolAxis {
  int64_t in = 0, out = 0;
  int64_t kernel = 0, stride = 1, padding = 0, dilation = 1;
};

struct PoolGeometry {
  int64_t planes = 0;  // Batch x channels.
  PoolAxis y, x;       // Height, width.
};

// T is float or double; pointers are device memory; work is enqueued on
// `stream`. Fixed windows only for the max ops.
// max_pool2d writes each window's maximum to y and its offset within the
// plane to argmax (max_pool2d_indices); either may be null.
template <class T>
void max_pool2d(const PoolGeometry& g, const T* x, T* y, int64_t* argmax, cudaStream_t stream);
// `argmax`: scratch for one int64 per element of grad_y.
template <class T>
void max_pool2d_backward(const PoolGeometry& g, const T* x, const T* grad_y, T* grad_x,
                         int64_t* argmax, cudaStream_t stream);
// Fixed windows divide by kernel height x width (padding counts as zeros),
// adaptive ones by their size.
template <class T>
void avg_pool2d(const PoolGeometry& g, const T* x, T* y, cudaStream_t stream);
template <class T>
void avg_pool2d_backward(const PoolGeometry& g, const T* grad_y, T* grad_x, cudaStream_t stream);

}  // namespace tandem::kernels::cuda::pooling
