// The precision float32 matrix products run at on CUDA devices: a
// process-wide switch, like PyTorch's torch.backends.cuda.matmul.allow_tf32.
//
//   #include "kernels/matmul_precision.h"
//
//   // Trade mantissa bits for tensor-core speed in every float32 matmul,
//   // linear and convolution on the GPU from now on:
//   tandem::set_cuda_matmul_precision(tandem::MatmulPrecision::kTF32);
//   Tensor y = tandem::matmul(a, b);  // a, b float32 on cuda:0: TF32 tensor cores
//   tandem::set_cuda_matmul_precision(tandem::MatmulPrecision::kFloat32);  // Back to exact.
//
// The setting is read when an op's kernel runs (on an engine worker), not
// when the op is called, so change it between steps, not while float32 GPU
// ops are in flight whose precision matters. It has no effect on the CPU, on
// float64, or in builds without CUDA (where it is still defined, so code that
// sets it compiles everywhere).
#pragma once

namespace tandem {

enum class MatmulPrecision {
  // Full float32 products (IEEE fma), as on the CPU: the default.
  kFloat32,
  // Inputs rounded to TF32 (10-bit mantissa) for tensor cores, float32
  // accumulation: ~8x the float32 throughput on an H100/H200, relative
  // error ~1e-3. Convolutions use TF32 too (cuDNN's default math).
  kTF32,
  // cuBLAS may round inputs to bfloat16 (8-bit mantissa), float32
  // accumulation: faster again, relative error ~1e-2. Convolutions run as
  // for kTF32 (cuDNN has no bfloat16 mode for float32 tensors).
  kBFloat16,
};

// Sets the precision of float32 matmul, linear, conv2d and conv2d's
// backward ops on every CUDA device, for every thread. Thread-safe.
void set_cuda_matmul_precision(MatmulPrecision precision);

// The current setting; kFloat32 until set.
MatmulPrecision cuda_matmul_precision();

}  // namespace tandem
