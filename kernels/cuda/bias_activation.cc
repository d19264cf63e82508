#include "kernels/cuda/bias_activation.h"

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/onednn.h"

namespace tandem::kernels::cuda {
namespace {

detail::Activation device_activation(onednn::Activation kind) {
  switch (kind) {
    case onednn::Activation::kNone:
      return detail::Activation::kNone;
    case onednn::Activation::kRelu:
      return detail::Activation::kRelu;
    case onednn::Activation::kGelu:
      return detail::Activation::kGelu;
    case onednn::Activation::kSigmoid:
      return detail::Activation::kSigmoid;
    case onednn::Activation::kTanh:
      return detail::Activation::kTanh;
    case onednn::Activation::kLeakyRelu:
      return detail::Activation::kLeakyRelu;
  }
  TANDEM_INTERNAL_ASSERT(false, "unknown fused activation ", static_cast<int>(kind));
}

}  // namespace

void add_bias_and_activate(const Tensor& y, const Tensor& bias, int64_t inner, const Attrs& attrs,
                           cudaStream_t stream) {
  if (y.numel() == 0) return;
  const onednn::FusedActivation activation = onednn::fused_activation(attrs);
  visit_floating(y.dtype(), [&]<class T>() {
    detail::launch_bias_activation<T>(y.data<T>(), bias.data<T>(), y.numel(), inner, bias.numel(),
                                      device_activation(activation.kind), activation.alpha, stream);
  });
}

}  // namespace tandem::kernels::cuda
