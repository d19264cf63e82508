// The epilogue of conv2d and linear on CUDA: one pass over the output that
// cuDNN or cuBLAS wrote, adding the bias and applying the layer's fused
// activation (Note [Fused activation] in kernels/cpu/onednn.h).
//
//   // y [N, O, H, W] written by cudnnConvolutionForward, bias [O]:
//   cuda::add_bias_and_activate(y, bias, /*inner=*/H * W, c.attrs, cuda::stream_of(c));
//
// Neither library fits: cuBLASLt's GELU epilogue is the tanh approximation,
// not the erf form the CPU computes, and cuDNN's fused bias-activation has
// neither GELU nor leaky ReLU.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/elementwise_formula.h"

namespace tandem::kernels::cuda {

// y[i] = activation(y[i] + bias[(i / inner) % bias.numel()]), in place,
// enqueued on `stream`. y and bias are float32 or float64 device tensors of
// one dtype; the activation comes from `attrs` ("activation", "alpha").
void add_bias_and_activate(const Tensor& y, const Tensor& bias, int64_t inner, const Attrs& attrs,
                           cudaStream_t stream);

namespace detail {

// The device pass behind add_bias_and_activate (bias_activation.cu), for T
// float or double: the activation is the unary op with code `activation`
// (kernels/elementwise_ops.h), or none if null, with parameter `alpha`.
template <class T>
void launch_bias_activation(T* y, const T* bias, int64_t count, int64_t inner, int64_t channels,
                            const ElementwiseInfo* activation, double alpha, cudaStream_t stream);

}  // namespace detail
}  // namespace tandem::kernels::cuda
