// What the fused attention kernels share (the CPU's in
// kernels/ops/attention.cc, the GPU's in kernels/cuda/attention.cu): the
// geometry of a call, where its mask is read, which keys a causal query sees,
// and which weights dropout keeps; nn::scaled_dot_product_attention reads
// kMaxLeadingAxes to choose the kernel.
//
// Note [Fused attention]
// scaled_dot_product_attention(q, k, v, mask?) computes, for every leading
// index b and query i,
//   s_ij  = scale * q_i . k_j, plus mask_ij (added) or -inf where mask_ij is
//           false (bool) or where j > i (causal, top-left aligned as torch)
//   lse_i = log(sum_j exp(s_ij))
//   out_i = sum_j exp(s_ij - lse_i) * drop_ij * v_j
// and returns (out, lse). The kernels never hold the [L, S] weights of more
// than a block of queries at a time; the backward recomputes each block's
// weights from q, k and lse (FlashAttention's recomputation, Dao et al.
// 2022), so what the backward keeps is lse, [..., L], not the weights. A
// query that may attend to no key gets NaN, as the composition of ops does
// (exp(-inf - -inf)); with no keys at all, zeros.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/shape.h"
#include "kernels/attrs.h"
#include "kernels/counter_rng.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

enum class AttentionMask : int {
  kNone,
  kAllowed,  // bool: true where the query may attend to the key.
  kAdded,    // Of the scores' dtype: added to them.
};

struct AttentionGeometry {
  static constexpr int kMaxLeadingAxes = 8;

  int64_t batch = 1;  // The product of the leading axes.
  // 0: query [..., L, E], the heads among the leading axes. h > 0: query
  // [N, L, h, E], a [batch, seq, embed] tensor with its heads split off (so
  // a multi-head layer needs no transposes), whose leading axes are,
  // logically, [N, h]; key, value, out and lse ([N, L, h]) likewise.
  int64_t heads = 0;
  int64_t queries = 0, keys = 0, features = 0, value_features = 0;
  double scale = 1;
  bool causal = false;
  double dropout_p = 0;
  int64_t seed = 0;
  AttentionMask mask = AttentionMask::kNone;
  // The mask, which has the query's rank, broadcasts along any axis of size
  // 1: its strides are 0 there.
  int leading_axes = 0;
  int64_t leading[kMaxLeadingAxes] = {};
  int64_t mask_leading_stride[kMaxLeadingAxes] = {};
  int64_t mask_query_stride = 0, mask_key_stride = 0;

  // Where the mask holds the scores' element (b, i, 0); key j is
  // mask_key_stride further on.
  TANDEM_HOST_DEVICE int64_t mask_row(int64_t b, int64_t i) const {
    int64_t offset = i * mask_query_stride;
    for (int a = leading_axes - 1; a >= 0; --a) {
      offset += (b % leading[a]) * mask_leading_stride[a];
      b /= leading[a];
    }
    return offset;
  }

  // The row (of E or Ev elements, or of one for lse) that holds position i
  // of leading index b in a tensor of `length` positions.
  TANDEM_HOST_DEVICE int64_t row(int64_t b, int64_t i, int64_t length) const {
    return heads == 0 ? b * length + i : ((b / heads) * length + i) * heads + b % heads;
  }
  // Rows from position i to i + 1.
  TANDEM_HOST_DEVICE int64_t row_step() const { return heads == 0 ? 1 : heads; }

  // How many keys, from key 0, query i may see: all, or i + 1 when causal.
  TANDEM_HOST_DEVICE int64_t visible_keys(int64_t i) const {
    return causal ? (i + 1 < keys ? i + 1 : keys) : keys;
  }

  // What dropout multiplies weight (b, i, j) by: 0 with probability p, else
  // 1 / (1 - p). Draw (b * L + i) * S + j of the call's seed, so that the
  // backward, and every device, drops the same weights.
  TANDEM_HOST_DEVICE double dropout_factor(const CounterRng& rng, int64_t b, int64_t i,
                                           int64_t j) const {
    if (dropout_p == 0) return 1;
    const auto counter = static_cast<uint64_t>((b * queries + i) * keys + j);
    return rng.uniform(counter) >= dropout_p ? 1 / (1 - dropout_p) : 0;
  }
};

// The geometry of a call with these inputs (mask null when there is none)
// and attributes (scale, causal, dropout_p, seed). Throws tandem::Error
// naming the shapes when they do not fit; inference calls it, so a bad call
// fails at the user's line.
AttentionGeometry attention_geometry(const Shape& query, const Shape& key, const Shape& value,
                                     const Shape* mask, DType mask_dtype, const Attrs& attrs);

struct KernelContext;
// The geometry of a kernel's call, whose inputs are query, key and value,
// then others, and the mask at `mask_input` when there are that many.
AttentionGeometry attention_geometry(const KernelContext& call, size_t mask_input);

}  // namespace tandem::kernels
