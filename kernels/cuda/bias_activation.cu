#include "kernels/cuda/bias_activation.h"
#include "kernels/cuda/launch.h"
#include "kernels/elementwise_ops.h"

namespace tandem::kernels::cuda::detail {
namespace {

struct Identity {
  template <class T>
  __device__ T operator()(T x) const {
    return x;
  }
};

// The activation with the standalone op's formula, so that a fused layer
// and the layer followed by the op agree.
template <class Op>
struct Activate {
  Op f;
  template <class T>
  __device__ T operator()(T x) const {
    return f(x);
  }
};

template <class T, class F>
__global__ void bias_activation(T* y, const T* bias, int64_t count, int64_t inner, int64_t channels,
                                F activation) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{blockDim.x} * gridDim.x) {
    y[i] = activation(y[i] + bias[(i / inner) % channels]);
  }
}

}  // namespace

template <class T>
void launch_bias_activation(T* y, const T* bias, int64_t count, int64_t inner, int64_t channels,
                            const ElementwiseInfo* activation, double alpha, cudaStream_t stream) {
  if (count == 0) return;
  auto launch = [&](auto f) {
    bias_activation<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(y, bias, count, inner,
                                                                        channels, f);
    TANDEM_CUDA_CHECK_LAUNCH();
  };
  if (activation == nullptr) return launch(Identity{});
  elementwise::UnaryOps::visit(activation->code, [&]<class Op>() {
    if constexpr (Op::kPostOp.algorithm != PostOpAlgorithm::kNone) {
      launch(Activate<Op>{make_formula<Op>(alpha, 0)});
    }
  });
}

template void launch_bias_activation<float>(float*, const float*, int64_t, int64_t, int64_t,
                                            const ElementwiseInfo*, double, cudaStream_t);
template void launch_bias_activation<double>(double*, const double*, int64_t, int64_t, int64_t,
                                             const ElementwiseInfo*, double, cudaStream_t);

}  // namespace tandem::kernels::cuda::detail
