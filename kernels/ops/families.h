// The register function of every op family. Internal to kernels/: the one
// list of families lives in registry.cc, which calls each of these once.
#pragma once

namespace tandem::kernels {

class Registry;

void register_elementwise_binary_ops(Registry& registry);  // elementwise_binary.cc
void register_elementwise_unary_ops(Registry& registry);   // elementwise_unary.cc
void register_reduce_ops(Registry& registry);              // reduce.cc
void register_shape_ops(Registry& registry);               // shape.cc
void register_creation_ops(Registry& registry);            // creation.cc
void register_matmul_ops(Registry& registry);              // matmul.cc
void register_conv_pool_ops(Registry& registry);           // conv_pool.cc
void register_norm_ops(Registry& registry);                // norm.cc
void register_softmax_loss_ops(Registry& registry);        // softmax_loss.cc
void register_fused_elementwise_ops(Registry& registry);   // fused_elementwise.cc
void register_device_copy_ops(Registry& registry);         // device_copy.cc
void register_indexing_ops(Registry& registry);            // indexing.cc
void register_scan_ops(Registry& registry);                // scan.cc
void register_sort_ops(Registry& registry);                // sort.cc
void register_padding_ops(Registry& registry);             // padding.cc
void register_interpolate_ops(Registry& registry);         // interpolate.cc
void register_attention_ops(Registry& registry);           // attention.cc
void register_recurrence_ops(Registry& registry);          // recurrence.cc
void register_collective_ops(Registry& registry);          // collective.cc

// The CUDA kernels of every family (kernels/cuda/register.cc), in CUDA builds.
void register_cuda_kernels(Registry& registry);

}  // namespace tandem::kernels
