// Handles to the ops that code outside their own family builds or
// recognizes: gradient formulas of other families, the tracer (views become
// reshape and slice nodes), the passes, the batch-size rewrite of a loaded
// graph, the ONNX importer (serialization/onnx_ops.cc). Each is defined in its family's file, next
// to the op's registration, so that the op's name is written only there and in its eager wrapper
// (tests/kernels/op_name_literals_test.cc). The elementwise ops need no handle: their structs in
// kernels/elementwise_ops.h carry the name (elementwise::Mul::kName).
//
//   if (node.op == &kernels::reshape_op()) ...
//   Tensor s = kernels::call1(kernels::sum_op(), {x}, attrs, where);
#pragma once

namespace tandem::kernels {

struct OpDef;

// kernels/ops/shape.cc
const OpDef& reshape_op();
const OpDef& concat_op();
const OpDef& take_op();
const OpDef& embedding_op();
const OpDef& expand_op();
const OpDef& slice_op();
const OpDef& split_op();
const OpDef& transpose_op();
// kernels/ops/padding.cc
const OpDef& pad_op();
// kernels/ops/reduce.cc
const OpDef& sum_op();
const OpDef& mean_op();
const OpDef& max_op();
const OpDef& min_op();
const OpDef& prod_op();
const OpDef& argmax_op();
// kernels/ops/elementwise_unary.cc
const OpDef& cast_op();
const OpDef& where_op();
// kernels/ops/elementwise_binary.cc: the comparisons.
const OpDef& eq_op();
const OpDef& ne_op();
const OpDef& lt_op();
const OpDef& le_op();
const OpDef& gt_op();
const OpDef& ge_op();
// kernels/ops/creation.cc
const OpDef& zeros_op();
const OpDef& ones_op();
const OpDef& full_op();
const OpDef& randn_op();
const OpDef& arange_op();
// kernels/ops/device_copy.cc
const OpDef& to_device_op();
// kernels/ops/matmul.cc, conv_pool.cc, norm.cc: the layers batch-norm
// folding rewrites.
const OpDef& linear_op();
const OpDef& conv2d_op();
const OpDef& batch_norm_op();
// ... and the other layers the ONNX importer builds.
const OpDef& matmul_op();
const OpDef& conv_transpose2d_op();
const OpDef& max_pool2d_op();
const OpDef& max_pool2d_indices_op();
const OpDef& avg_pool2d_op();
const OpDef& layer_norm_op();
// kernels/ops/softmax_loss.cc
const OpDef& softmax_op();
const OpDef& log_softmax_op();
// kernels/ops/sort.cc
const OpDef& topk_op();
// kernels/ops/recurrence.cc
const OpDef& rnn_tanh_op();
const OpDef& rnn_relu_op();
const OpDef& lstm_op();
const OpDef& gru_op();
// kernels/ops/indexing.cc: values sent back to the positions they came from
// (the gradients of gather, sort and topk).
const OpDef& scatter_add_op();
const OpDef& scatter_op();
const OpDef& gather_op();
const OpDef& gather_nd_op();
const OpDef& scatter_nd_add_op();
const OpDef& one_hot_op();
// kernels/ops/scan.cc: the products of all but one element (prod's gradient).
const OpDef& cumprod_op();
const OpDef& cumsum_op();
// kernels/ops/fused_elementwise.cc: what elementwise fusion and the
// optimizers' fused updates build.
const OpDef& fused_elementwise_op();

}  // namespace tandem::kernels
