// The CUDA kernels of each op family. Internal to kernels/cuda/: register.cc
// calls each of these once, after every op is registered.
#pragma once

namespace tandem::kernels {

class Registry;

void register_elementwise_cuda_kernels(Registry& registry);   // elementwise.cu
void register_shape_cuda_kernels(Registry& registry);         // shape.cu
void register_creation_cuda_kernels(Registry& registry);      // creation.cu
void register_reduce_cuda_kernels(Registry& registry);        // reduce.cu
void register_softmax_loss_cuda_kernels(Registry& registry);  // softmax_loss.cu
void register_norm_cuda_kernels(Registry& registry);          // norm.cu
void register_matmul_cuda_kernels(Registry& registry);        // matmul.cc (cuBLAS)
void register_conv_pool_cuda_kernels(Registry& registry);     // conv_pool.cc (cuDNN)
void register_copy_cuda_kernels(Registry& registry);          // copy.cc
void register_indexing_cuda_kernels(Registry& registry);      // indexing.cu
void register_scan_cuda_kernels(Registry& registry);          // scan.cu
void register_sort_cuda_kernels(Registry& registry);          // sort.cu
void register_padding_cuda_kernels(Registry& registry);       // padding.cu
void register_interpolate_cuda_kernels(Registry& registry);   // interpolate.cu
void register_attention_cuda_kernels(Registry& registry);     // attention.cu
void register_recurrence_cuda_kernels(Registry& registry);    // recurrence.cu

}  // namespace tandem::kernels
