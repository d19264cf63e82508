// The CUDA kernels of matmul and linear (kernels/ops/matmul.cc): cuBLAS
// GEMMs, float32 at the precision kernels/matmul_precision.h selects, and
// float64.
//
// Note [Row-major products on cuBLAS]
// cuBLAS is column-major, and a row-major [r, c] matrix read column-major
// is its transpose. So C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T:
// B is cuBLAS's first operand and A its second, m and n swap places, and a
// stored transpose (the transpose_a / transpose_b attributes) turns into
// CUBLAS_OP_T with the stored row length as the leading dimension.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/broadcast.h"
#include "kernels/cuda/bias_activation.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/launch.h"
#include "kernels/matmul_precision.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// `count` row-major products C_i = op(A_i) op(B_i), op(A_i) [m, k] and
// op(B_i) [k, n]: A_i starts stride_a elements after A_(i-1) (0: one A for
// all), likewise B_i; the C_i are contiguous.
struct GemmBatch {
  int64_t m = 1, n = 1, k = 1;
  bool transpose_a = false, transpose_b = false;
  int64_t count = 1, stride_a = 0, stride_b = 0;
};

cudaDataType cuda_data_type(DType dtype) {
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
               "CUDA matrix products take float32 or float64, got ", dtype_name(dtype));
  return dtype == DType::kFloat64 ? CUDA_R_64F : CUDA_R_32F;
}

cublasComputeType_t compute_type(DType dtype) {
  if (dtype == DType::kFloat64) return CUBLAS_COMPUTE_64F;
  switch (cuda_matmul_precision()) {
    case MatmulPrecision::kFloat32:
      return CUBLAS_COMPUTE_32F;
    case MatmulPrecision::kTF32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MatmulPrecision::kBFloat16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  TANDEM_INTERNAL_ASSERT(false, "unknown matmul precision");
}

// Enqueues the batch (Note [Row-major products on cuBLAS]); a, b and c
// point at the first matrices.
void gemm(cublasHandle_t handle, DType dtype, const GemmBatch& g, const void* a, const void* b,
          void* c) {
  const cudaDataType type = cuda_data_type(dtype);
  TANDEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle, g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      g.n, g.m, g.k, cuda::kOne.for_dtype(dtype), b, type, g.transpose_b ? g.k : g.n, g.stride_b, a,
      type, g.transpose_a ? g.m : g.k, g.stride_a, cuda::kZero.for_dtype(dtype), c, type, g.n,
      g.m * g.n, g.count, compute_type(dtype), CUBLAS_GEMM_DEFAULT));
}

// One batch axis of a product: its size and, in elements, how far apart
// consecutive entries lie in a and in b (0 where the operand is broadcast).
struct BatchAxis {
  int64_t size, stride_a, stride_b;
};

// The result's batch axes as few axes as the operands' strides allow,
// outermost first: size-1 axes dropped, and an axis merged into the next
// inner one where it continues that one's strides in both operands. The
// result's own batch is contiguous, so it never stops a merge. Usually one
// axis is left, and the product is one strided-batched call.
std::vector<BatchAxis> merged_batch_axes(const Shape& batch, const Shape& batch_a,
                                         const Shape& batch_b, int64_t matrix_a, int64_t matrix_b) {
  const Strides sa = broadcast_strides(batch_a, batch), sb = broadcast_strides(batch_b, batch);
  std::vector<BatchAxis> axes;  // Innermost first while building.
  for (int axis = batch.rank() - 1; axis >= 0; --axis) {
    if (batch[axis] == 1) continue;
    const BatchAxis next{batch[axis], sa[axis] * matrix_a, sb[axis] * matrix_b};
    if (!axes.empty()) {
      BatchAxis& inner = axes.back();
      if (next.stride_a == inner.stride_a * inner.size &&
          next.stride_b == inner.stride_b * inner.size) {
        inner.size *= next.size;
        continue;
      }
    }
    axes.push_back(next);
  }
  std::reverse(axes.begin(), axes.end());
  return axes;
}

Shape leading(const Shape& s, int drop) {
  return Shape(absl::Span<const int64_t>(s.dims().data(), s.rank() - drop));
}

char* advance(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw_data()) + elements * dtype_size(t.dtype());
}

// NumPy semantics as the CPU kernel implements them: a 1-D a is a row
// [1, k] and a 1-D b a column [k, 1], whose added axes the result lacks;
// the transposes apply to operands of rank 2 or more.
void matmul_kernel(const KernelContext& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &out = c.outputs[0];
  const Shape &sa = a.shape(), &sb = b.shape();
  if (out.numel() == 0) return;
  cudaStream_t stream = cuda::stream_of(c);
  GemmBatch g;
  g.transpose_a = c.attrs.get_bool("transpose_a") && sa.rank() >= 2;
  g.transpose_b = c.attrs.get_bool("transpose_b") && sb.rank() >= 2;
  if (sa.rank() == 1) {
    g.k = sa[0];
  } else {
    g.m = g.transpose_a ? sa.dim(-1) : sa.dim(-2);
    g.k = g.transpose_a ? sa.dim(-2) : sa.dim(-1);
  }
  if (sb.rank() >= 2) g.n = g.transpose_b ? sb.dim(-2) : sb.dim(-1);
  if (g.k == 0) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), stream));
    return;
  }
  const int matrix_axes_a = sa.rank() >= 2 ? 2 : 1, matrix_axes_b = sb.rank() >= 2 ? 2 : 1;
  const Shape batch = leading(out.shape(), (sa.rank() >= 2) + (sb.rank() >= 2));
  std::vector<BatchAxis> axes = merged_batch_axes(batch, leading(sa, matrix_axes_a),
                                                  leading(sb, matrix_axes_b), g.m * g.k, g.k * g.n);
  // The innermost axis is cuBLAS's batch; any others are a loop here.
  if (!axes.empty()) {
    g.count = axes.back().size;
    g.stride_a = axes.back().stride_a;
    g.stride_b = axes.back().stride_b;
    axes.pop_back();
  }
  // One b for a batch of consecutive untransposed a's ([batch, m, k] @ [k, n]):
  // the a's stack into one [count m, k] matrix, and one large GEMM runs
  // faster than many small ones.
  if (g.count > 1 && g.stride_b == 0 && !g.transpose_a && g.stride_a == g.m * g.k) {
    g.m *= g.count;
    g.count = 1;
  }
  int64_t loops = 1;
  for (const BatchAxis& axis : axes) loops *= axis.size;
  cublasHandle_t handle = cuda::cublas_handle(c);
  for (int64_t loop = 0; loop < loops; ++loop) {
    int64_t offset_a = 0, offset_b = 0, rest = loop;
    for (auto axis = axes.rbegin(); axis != axes.rend(); ++axis) {
      const int64_t index = rest % axis->size;
      rest /= axis->size;
      offset_a += index * axis->stride_a;
      offset_b += index * axis->stride_b;
    }
    gemm(handle, a.dtype(), g, advance(a, offset_a), advance(b, offset_b),
         advance(out, loop * g.count * g.m * g.n));
  }
}

// y [rows, out] = x [rows, in] W^T + bias, then the fused activation.
void linear_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &bias = c.inputs[2], &y = c.outputs[0];
  if (y.numel() == 0) return;
  cudaStream_t stream = cuda::stream_of(c);
  const int64_t in = w.shape()[1], out = w.shape()[0];
  if (in == 0) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), stream));
  } else {
    const GemmBatch g{.m = y.numel() / out, .n = out, .k = in, .transpose_b = true};
    gemm(cuda::cublas_handle(c), x.dtype(), g, x.raw_data(), w.raw_data(), y.raw_data());
  }
  cuda::add_bias_and_activate(y, bias, /*inner=*/1, c.attrs, stream);
}

}  // namespace

void register_matmul_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("matmul", matmul_kernel);
  registry.set_cuda_kernel("linear", linear_kernel);
}

}  // namespace tandem::kernels
