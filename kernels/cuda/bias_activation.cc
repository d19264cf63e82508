#include "kernels/cuda/bias_activation.h"

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/onednn.h"

namespace tandem::kernels::cuda {
void add_bias_and_activate(const Tensor& y, const Tensor& bias, int64_t inner, const Attrs& attrs,
                           cudaStream_t stream) {
  if (y.numel() == 0) return;
  const onednn::FusedActivation activation = onednn::fused_activation(attrs);
  visit_floating(y.dtype(), [&]<class T>() {
    detail::launch_bias_activation<T>(y.data<T>(), bias.data<T>(), y.numel(), inner, bias.numel(),
                                      activation.op, activation.alpha, stream);
  });
}

}  // namespace tandem::kernels::cuda
