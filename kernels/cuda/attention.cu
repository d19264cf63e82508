// The CUDA kernels of kernels/ops/attention.cc (Note [Fused attention] in
// kernels/attention.h). One thread per query row: the forward passes over
// the row's keys three times (the maximum, the sum, the weighted values),
// recomputing each score, and keeps no weights; the backward computes its
// row of the query's gradient and adds its share of the key's and value's
// gradients with atomics, so float sums may differ from the CPU's in the
// last bits. Scores and sums are in double. These are the plain,
// correct kernels; a tiled one (shared-memory blocks of keys, as
// FlashAttention) is what a GPU workload would want next.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/attention.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/cuda/indexing.cuh"

namespace tandem::kernels {
namespace cuda {
namespace {

template <class T>
struct Rows {
  const T* q;
  const T* k;
  const T* v;
  const void* mask;  // bool or T, as g.mask says; null when there is none.
  AttentionGeometry g;

  // The score of (b, i, j), -inf where the query may not attend.
  __device__ double score(int64_t b, int64_t i, int64_t j) const {
    const T* qi = q + g.row(b, i, g.queries) * g.features;
    const T* kj = k + g.row(b, j, g.keys) * g.features;
    double dot = 0;
    for (int64_t e = 0; e < g.features; ++e) {
      dot += static_cast<double>(qi[e]) * static_cast<double>(kj[e]);
    }
    double s = g.scale * dot;
    if (g.mask != AttentionMask::kNone) {
      const int64_t at = g.mask_row(b, i) + j * g.mask_key_stride;
      if (g.mask == AttentionMask::kAllowed) {
        if (!static_cast<const bool*>(mask)[at]) s = -INFINITY;
      } else {
        s += static_cast<double>(static_cast<const T*>(mask)[at]);
      }
    }
    return s;
  }
};

template <class T>
struct Forward {
  Rows<T> rows;
  T* out;
  T* lse;
  __device__ void operator()(int64_t row) const {
    const AttentionGeometry& g = rows.g;
    const int64_t b = row / g.queries, i = row - b * g.queries;
    const int64_t n = g.visible_keys(i);
    double shift = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const double s = rows.score(b, i, j);
      shift = s > shift ? s : shift;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += exp(rows.score(b, i, j) - shift);
    const double log_sum = shift + log(sum);
    const int64_t at = g.row(b, i, g.queries);
    lse[at] = static_cast<T>(log_sum);
    T* o = out + at * g.value_features;
    for (int64_t e = 0; e < g.value_features; ++e) o[e] = T{0};
    const CounterRng rng(g.seed);
    for (int64_t j = 0; j < n; ++j) {
      const double w = exp(rows.score(b, i, j) - log_sum) * g.dropout_factor(rng, b, i, j);
      const T* vj = rows.v + g.row(b, j, g.keys) * g.value_features;
      for (int64_t e = 0; e < g.value_features; ++e) {
        o[e] = static_cast<T>(static_cast<double>(o[e]) + w * static_cast<double>(vj[e]));
      }
    }
  }
};

// Note [Fused attention backward] in kernels/ops/attention.cc, one row i.
template <class T>
struct Backward {
  Rows<T> rows;
  const T* out;
  const T* lse;
  const T* grad_out;
  const T* grad_lse;
  T* dq;
  T* dk;
  T* dv;
  __device__ void operator()(int64_t row) const {
    const AttentionGeometry& g = rows.g;
    const int64_t b = row / g.queries, i = row - b * g.queries;
    const int64_t e_q = g.features, e_v = g.value_features;
    const int64_t at = g.row(b, i, g.queries);
    const T* go = grad_out + at * e_v;
    const T* o = out + at * e_v;
    double d = -static_cast<double>(grad_lse[at]);
    for (int64_t e = 0; e < e_v; ++e) d += static_cast<double>(go[e]) * static_cast<double>(o[e]);
    T* dqi = dq + at * e_q;
    for (int64_t e = 0; e < e_q; ++e) dqi[e] = T{0};
    const T* qi = rows.q + at * e_q;
    const CounterRng rng(g.seed);
    const int64_t n = g.visible_keys(i);
    for (int64_t j = 0; j < n; ++j) {
      const double p = exp(rows.score(b, i, j) - static_cast<double>(lse[at]));
      const double f = g.dropout_factor(rng, b, i, j);
      const int64_t key = g.row(b, j, g.keys);
      const T* vj = rows.v + key * e_v;
      double dw = 0;
      for (int64_t e = 0; e < e_v; ++e) {
        dw += static_cast<double>(go[e]) * static_cast<double>(vj[e]);
        atomic_add(dv + key * e_v + e, static_cast<T>(p * f * static_cast<double>(go[e])));
      }
      const double ds = g.scale * p * (dw * f - d);
      const T* kj = rows.k + key * e_q;
      for (int64_t e = 0; e < e_q; ++e) {
        dqi[e] = static_cast<T>(static_cast<double>(dqi[e]) + ds * static_cast<double>(kj[e]));
        atomic_add(dk + key * e_q + e, static_cast<T>(ds * static_cast<double>(qi[e])));
      }
    }
  }
};

template <class T>
Rows<T> rows_of(const KernelContext& c, const AttentionGeometry& g, size_t mask_input) {
  return {c.inputs[0].data<T>(), c.inputs[1].data<T>(), c.inputs[2].data<T>(),
          c.inputs.size() > mask_input ? c.inputs[mask_input].raw_data() : nullptr, g};
}

void attention_kernel(const KernelContext& c) {
  const AttentionGeometry g = attention_geometry(c, 3);
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    for_each(stream_of(c), g.batch * g.queries,
             Forward<T>{rows_of<T>(c, g, 3), c.outputs[0].data<T>(), c.outputs[1].data<T>()});
  });
}

void attention_backward_kernel(const KernelContext& c) {
  const AttentionGeometry g = attention_geometry(c, 7);
  for (int k : {1, 2}) {
    const Tensor& grad = c.outputs[k];
    TANDEM_CUDA_CHECK(cudaMemsetAsync(grad.raw_data(), 0, grad.nbytes(), stream_of(c)));
  }
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    for_each(stream_of(c), g.batch * g.queries,
             Backward<T>{rows_of<T>(c, g, 7), c.inputs[3].data<T>(), c.inputs[4].data<T>(),
                         c.inputs[5].data<T>(), c.inputs[6].data<T>(), c.outputs[0].data<T>(),
                         c.outputs[1].data<T>(), c.outputs[2].data<T>()});
  });
}

}  // namespace
}  // namespace cuda

void register_attention_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("scaled_dot_product_attention", cuda::attention_kernel);
  registry.set_cuda_kernel("scaled_dot_product_attention_backward",
                           cuda::attention_backward_kernel);
}

}  // namespace tandem::kernels
