#include "kernels/cuda/families.h"
#include "kernels/ops/families.h"

namespace tandem::kernels {

void register_cuda_kernels(Registry& registry) {
  register_elementwise_cuda_kernels(registry);
  register_shape_cuda_kernels(registry);
  register_creation_cuda_kernels(registry);
  register_reduce_cuda_kernels(registry);
  register_softmax_loss_cuda_kernels(registry);
  register_norm_cuda_kernels(registry);
  register_matmul_cuda_kernels(registry);
  register_conv_pool_cuda_kernels(registry);
  register_copy_cuda_kernels(registry);
  register_indexing_cuda_kernels(registry);
  register_scan_cuda_kernels(registry);
  register_sort_cuda_kernels(registry);
  register_padding_cuda_kernels(registry);
  register_interpolate_cuda_kernels(registry);
  register_attention_cuda_kernels(registry);
  register_recurrence_cuda_kernels(registry);
}

}  // namespace tandem::kernels
