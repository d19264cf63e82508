// scaled_dot_product_attention(q, k, v, mask?) -> (out, lse) and its
// backward, in blocks of queries (Note [Fused attention] in
// kernels/attention.h). Each block's scores come from one GEMM, their
// softmax is taken in place, and one more GEMM applies them to the values;
// the backward recomputes the block's weights from lse and runs the five
// GEMMs of the gradient. float32 GEMMs are oneDNN's sgemm (single-threaded
// inside the blocks' parallel loop), float64 ones plain loops (the path the
// finite-difference checks use).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {

// [N, L, h, E] seen as [N, h, L, E].
Shape heads_first(const Shape& s) { return s.rank() == 4 ? Shape{s[0], s[2], s[1], s[3]} : s; }

Attrs with_heads(const Attrs& attrs, int64_t heads) {
  Attrs changed = attrs;
  changed.set("heads", heads);
  return changed;
}

AttentionGeometry attention_geometry(const Shape& q, const Shape& k, const Shape& v,
                                     const Shape* mask, DType mask_dtype, const Attrs& attrs) {
  const int64_t heads = attrs.get_int("heads");
  if (heads != 0) {
    const bool split = heads > 0 && q.rank() == 4 && k.rank() == 4 && v.rank() == 4 &&
                       q[2] == heads && k[2] == heads && v[2] == heads;
    TANDEM_CHECK(split, "with heads = ", heads, ", query, key and value must be [N, sequence, ",
                 heads, ", features], got query ", q.to_string(), ", key ", k.to_string(),
                 " and value ", v.to_string());
    AttentionGeometry g = attention_geometry(heads_first(q), heads_first(k), heads_first(v), mask,
                                             mask_dtype, with_heads(attrs, 0));
    g.heads = heads;
    return g;
  }
  const auto shapes = [&] {
    return str_cat("query ", q.to_string(), ", key ", k.to_string(), " and value ", v.to_string());
  };
  TANDEM_CHECK(q.rank() >= 2 && k.rank() == q.rank() && v.rank() == q.rank(),
               "query, key and value need one rank, at least 2 ([..., sequence, features]), "
               "got ",
               shapes());
  const int lead = q.rank() - 2;
  TANDEM_CHECK(lead <= AttentionGeometry::kMaxLeadingAxes, "at most ",
               AttentionGeometry::kMaxLeadingAxes, " axes may lead [sequence, features], got ",
               shapes());
  AttentionGeometry g;
  g.leading_axes = lead;
  for (int a = 0; a < lead; ++a) {
    TANDEM_CHECK(k[a] == q[a] && v[a] == q[a],
                 "query, key and value must share the axes before [sequence, features], got ",
                 shapes());
    g.leading[a] = q[a];
    g.batch = checked_mul(g.batch, q[a], "the batch of ", shapes());
  }
  g.queries = q[lead];
  g.keys = k[lead];
  g.features = q[lead + 1];
  g.value_features = v[lead + 1];
  TANDEM_CHECK(k[lead + 1] == g.features,
               "query and key must have the same features (last axis), got ", shapes());
  TANDEM_CHECK(v[lead] == g.keys,
               "key and value must have the same sequence length (axis -2), got ", shapes());
  // Dropout numbers the weights [batch, L, S] (AttentionGeometry::dropout_factor).
  checked_mul(checked_mul(g.batch, g.queries, "the attention weights of ", shapes()), g.keys,
              "the attention weights of ", shapes());
  g.scale = attrs.get_float("scale");
  TANDEM_CHECK(std::isfinite(g.scale), "scale must be finite, got ", g.scale);
  g.causal = attrs.get_bool("causal");
  g.dropout_p = attrs.get_float("dropout_p");
  TANDEM_CHECK(g.dropout_p >= 0 && g.dropout_p < 1, "dropout_p must be in [0, 1), got ",
               g.dropout_p);
  g.seed = attrs.get_int("seed");
  if (mask == nullptr) return g;

  const Shape& m = *mask;
  const auto broadcasts = [](int64_t size, int64_t to) { return size == 1 || size == to; };
  bool fits =
      m.rank() == q.rank() && broadcasts(m[lead], g.queries) && broadcasts(m[lead + 1], g.keys);
  for (int a = 0; fits && a < lead; ++a) fits = broadcasts(m[a], q[a]);
  TANDEM_CHECK(fits, "the mask ", m.to_string(),
               " must have the query's rank and each axis 1 or the scores' [..., L = ", g.queries,
               ", S = ", g.keys, "], for ", shapes());
  g.mask = mask_dtype == DType::kBool ? AttentionMask::kAllowed : AttentionMask::kAdded;
  // Row-major strides, 0 along the axes the mask broadcasts.
  int64_t stride = 1;
  for (int a = m.rank() - 1; a >= 0; --a) {
    const int64_t along = m[a] == 1 ? 0 : stride;
    if (a == lead + 1) {
      g.mask_key_stride = along;
    } else if (a == lead) {
      g.mask_query_stride = along;
    } else {
      g.mask_leading_stride[a] = along;
    }
    stride *= m[a];
  }
  return g;
}

AttentionGeometry attention_geometry(const KernelContext& call, size_t mask_input) {
  const Tensor* mask = call.inputs.size() > mask_input ? &call.inputs[mask_input] : nullptr;
  return attention_geometry(call.inputs[0].shape(), call.inputs[1].shape(), call.inputs[2].shape(),
                            mask == nullptr ? nullptr : &mask->shape(),
                            mask == nullptr ? DType::kBool : mask->dtype(), call.attrs);
}

namespace {

// The shared checks of both ops' inference: dtypes, then the geometry.
AttentionGeometry checked_geometry(absl::Span<const TensorMeta> qkv, const TensorMeta* mask,
                                   const Attrs& attrs) {
  check_floating("query", qkv[0].dtype);
  TANDEM_CHECK(qkv[1].dtype == qkv[0].dtype && qkv[2].dtype == qkv[0].dtype,
               "query, key and value must share one dtype, got ", dtype_name(qkv[0].dtype), ", ",
               dtype_name(qkv[1].dtype), " and ", dtype_name(qkv[2].dtype));
  if (mask != nullptr) {
    TANDEM_CHECK(mask->dtype == DType::kBool || mask->dtype == qkv[0].dtype,
                 "the mask must be bool (true: may attend) or ", dtype_name(qkv[0].dtype),
                 " (added to the scores), got ", dtype_name(mask->dtype));
  }
  return attention_geometry(qkv[0].shape, qkv[1].shape, qkv[2].shape,
                            mask == nullptr ? nullptr : &mask->shape,
                            mask == nullptr ? DType::kBool : mask->dtype, attrs);
}

// The forward's outputs: out [..., L, Ev] and lse [..., L].
TensorMetas attention_outputs(const Shape& query, const AttentionGeometry& g, DType dtype) {
  Shape::Dims out(query.begin(), query.end());
  out.back() = g.value_features;
  Shape::Dims lse(query.begin(), query.end() - 1);
  return {{Shape(out), dtype}, {Shape(lse), dtype}};
}

// (query, key, value[, mask]) -> (out, lse).
TensorMetas infer_attention(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  TANDEM_CHECK(in.size() == 3 || in.size() == 4,
               "takes query, key, value and an optional mask, got ", in.size(), " inputs");
  const AttentionGeometry g =
      checked_geometry(in.subspan(0, 3), in.size() == 4 ? &in[3] : nullptr, attrs);
  return attention_outputs(in[0].shape, g, in[0].dtype);
}

// (query, key, value, out, lse, grad_out, grad_lse[, mask]) -> the gradients
// of query, key and value.
TensorMetas infer_attention_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  TANDEM_CHECK(in.size() == 7 || in.size() == 8,
               "takes query, key, value, out, lse, their two gradients and an optional mask, "
               "got ",
               in.size(), " inputs");
  const AttentionGeometry g =
      checked_geometry(in.subspan(0, 3), in.size() == 8 ? &in[7] : nullptr, attrs);
  const TensorMetas forward = attention_outputs(in[0].shape, g, in[0].dtype);
  const char* names[] = {"out", "lse", "the gradient of out", "the gradient of lse"};
  for (int k = 0; k < 4; ++k) {
    const TensorMeta& got = in[3 + k];
    const TensorMeta& want = forward[k % 2];
    TANDEM_CHECK(got.shape == want.shape && got.dtype == want.dtype, names[k], " must be ",
                 dtype_name(want.dtype), " ", want.shape.to_string(), ", got ",
                 dtype_name(got.dtype), " ", got.shape.to_string());
  }
  return {in[0], in[1], in[2]};
}

// The row passes (Note [Row passes in two builds] in kernels/cpu/fast_exp.h).

// row[j] = cpu::fast_exp(row[j] - shift) for j < n.
template <class T>
TANDEM_VECTOR_CLONES void exp_row(T* row, int64_t n, T shift) {
  for (int64_t j = 0; j < n; ++j) row[j] = cpu::fast_exp(row[j] - shift);
}

// The unnormalized softmax of row[0, n), in place: e^(s_j - max), in eight
// independent lanes for the maximum and the sum so that both vectorize.
// Returns the row's sum; its logsumexp is shift + log(sum). The caller
// divides the row's product with v by the sum, ev values rather than n.
template <class T>
struct RowExp {
  T shift, sum;
};
template <class T>
TANDEM_VECTOR_CLONES RowExp<T> exp_row_and_sum(T* row, int64_t n) {
  constexpr int kLanes = 8;
  constexpr T kLow = -std::numeric_limits<T>::infinity();
  T top[kLanes];
  std::fill(top, top + kLanes, kLow);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) top[l] = std::max(top[l], row[j + l]);
  }
  for (; j < n; ++j) top[0] = std::max(top[0], row[j]);
  T shift = top[0];
  for (int l = 1; l < kLanes; ++l) shift = std::max(shift, top[l]);
  T lane[kLanes] = {};
  for (j = 0; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      row[j + l] = cpu::fast_exp(row[j + l] - shift);
      lane[l] += row[j + l];
    }
  }
  for (; j < n; ++j) {
    row[j] = cpu::fast_exp(row[j] - shift);
    lane[0] += row[j];
  }
  T sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return {shift, sum};
}

// The gradient of the scores from the weights' (Note [Fused attention
// backward]): ds[j] = p[j] * (ds[j] - d), in place.
template <class T>
TANDEM_VECTOR_CLONES void softmax_gradient_row(T* ds, const T* p, int64_t n, T d) {
  for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - d);
}

// The tensors of one call, as pointers to their elements.
template <class T>
struct AttentionData {
  const T* q;
  const T* k;
  const T* v;
  const Tensor* mask;  // Null when there is none.
  const AttentionGeometry& g;

  // Row i of leading index b, n keys wide, hidden where the query may not
  // attend (-inf) and the mask added where it is added. Keys from n on
  // are not touched.
  void mask_scores(int64_t b, int64_t i, T* row, int64_t n) const {
    constexpr T kHidden = -std::numeric_limits<T>::infinity();
    const int64_t visible = std::min(n, g.visible_keys(i));
    std::fill(row + visible, row + n, kHidden);
    if (g.mask == AttentionMask::kNone) return;
    const int64_t at = g.mask_row(b, i), step = g.mask_key_stride;
    if (g.mask == AttentionMask::kAllowed) {
      const bool* allowed = mask->data<bool>() + at;
      for (int64_t j = 0; j < visible; ++j) {
        if (!allowed[j * step]) row[j] = kHidden;
      }
    } else {
      const T* added = mask->data<T>() + at;
      for (int64_t j = 0; j < visible; ++j) row[j] += added[j * step];
    }
  }

  // scores[r, j] = scale * q_(i0 + r) . k_j + the mask, for `rows` queries
  // from i0 and n keys from 0.
  void scores(int64_t b, int64_t i0, int64_t rows, int64_t n, T* out) const {
    const int64_t e = g.features;
    const int64_t step = g.row_step() * e;
    cpu::gemm(false, true, rows, n, e, static_cast<T>(g.scale), q + g.row(b, i0, g.queries) * e,
              step, k + g.row(b, 0, g.keys) * e, step, T{0}, out, n);
    for (int64_t r = 0; r < rows; ++r) mask_scores(b, i0 + r, out + r * n, n);
  }

  // Calls use(k, f) with the dropout factor f of each weight of the block
  // [rows, n] from query i0, k its index in the block.
  template <class Use>
  void dropout_factors(int64_t b, int64_t i0, int64_t rows, int64_t n, Use use) const {
    const CounterRng rng(g.seed);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        use(r * n + j, static_cast<T>(g.dropout_factor(rng, b, i0 + r, j)));
      }
    }
  }
};

// Queries per block: their scores and the backward's two more [rows, n]
// buffers stay within a core's L2 cache, in blocks no taller than GEMMs
// need to run near their peak.
int64_t block_rows(const AttentionGeometry& g) {
  constexpr int64_t kScoresPerBlock = 65536;
  const int64_t rows = std::clamp<int64_t>(kScoresPerBlock / std::max<int64_t>(g.keys, 1), 16, 256);
  return std::max<int64_t>(std::min(rows, g.queries), 1);
}

// A call's multiply-adds, about batch * L * S * (E + Ev), from the shapes
// alone (OpDef::work sees no attributes, so not the layout): every query
// row times the key rows of its first leading index. That is exact with one
// leading axis and over by the heads with more, or with heads split off,
// which only keeps more calls off a single thread. Saturating: it only
// steers threading. At most onednn::kOneThreadWork of them run on one
// thread (Note [Small primitives on one thread] in kernels/cpu/onednn.h).
int64_t multiply_adds(const Shape& query, const Shape& value) {
  const int64_t e = std::max<int64_t>(query[query.rank() - 1], 1);
  const int64_t ev = value[value.rank() - 1];
  const int64_t lead = query.rank() >= 3 ? std::max<int64_t>(query[0], 1) : 1;
  const int64_t query_rows = query.numel() / e;
  const int64_t key_rows = value.numel() / std::max<int64_t>(ev, 1) / lead;
  int64_t pairs, work;
  if (__builtin_mul_overflow(query_rows, key_rows, &pairs) ||
      __builtin_mul_overflow(pairs, e + ev, &work)) {
    return std::numeric_limits<int64_t>::max();
  }
  return work;
}
int64_t attention_work(const CallShapes& shapes) {
  return multiply_adds(*shapes.inputs[0], *shapes.inputs[2]);
}
bool attention_on_one_core(const CallShapes& shapes) {
  return attention_work(shapes) <= onednn::kOneThreadWork;
}
bool on_one_core(const KernelContext& c) {
  return multiply_adds(c.inputs[0].shape(), c.inputs[2].shape()) <= onednn::kOneThreadWork;
}

void attention_kernel(const KernelContext& c) {
  const AttentionGeometry g = attention_geometry(c, 3);
  const Tensor* mask = c.inputs.size() == 4 ? &c.inputs[3] : nullptr;
  const int64_t rows = block_rows(g);
  const int64_t blocks = g.queries == 0 ? 0 : (g.queries + rows - 1) / rows;
  onednn::OneThread one_thread(on_one_core(c));
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    const AttentionData<T> data{c.inputs[0].data<T>(), c.inputs[1].data<T>(), c.inputs[2].data<T>(),
                                mask, g};
    T* out = c.outputs[0].data<T>();
    T* lse = c.outputs[1].data<T>();
    const int64_t ev = g.value_features;
    parallel_for(g.batch * blocks, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> weights, sums;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / blocks, i0 = (task % blocks) * rows;
        const int64_t height = std::min(rows, g.queries - i0);
        const int64_t n = g.visible_keys(i0 + height - 1);  // The keys any row of it sees.
        const int64_t step = g.row_step();
        T* o = out + g.row(b, i0, g.queries) * ev;
        T* l = lse + g.row(b, i0, g.queries);
        if (n == 0) {  // No keys: the sum over them is 0.
          for (int64_t r = 0; r < height; ++r) {
            std::fill(o + r * step * ev, o + r * step * ev + ev, T{0});
            l[r * step] = -std::numeric_limits<T>::infinity();
          }
          continue;
        }
        weights.resize(static_cast<size_t>(height * n));
        sums.resize(static_cast<size_t>(height));
        data.scores(b, i0, height, n, weights.data());
        for (int64_t r = 0; r < height; ++r) {
          const RowExp<T> e = exp_row_and_sum(weights.data() + r * n, n);
          l[r * step] = e.shift + std::log(e.sum);
          sums[r] = e.sum;
        }
        if (g.dropout_p > 0) {
          data.dropout_factors(b, i0, height, n, [&](int64_t k, T f) { weights[k] *= f; });
        }
        cpu::gemm(false, false, height, ev, n, T{1}, weights.data(), n,
                  data.v + g.row(b, 0, g.keys) * ev, step * ev, T{0}, o, step * ev);
        for (int64_t r = 0; r < height; ++r) {  // The softmax's division.
          const T inverse = 1 / sums[r];
          T* row = o + r * step * ev;
          for (int64_t j = 0; j < ev; ++j) row[j] *= inverse;
        }
      }
    });
  });
}

// Note [Fused attention backward]
// With P the block's weights (recomputed as exp(s - lse)), F the dropout
// factors and W = P * F what multiplied v:
//   dv += W^T dout
//   dW  = dout v^T, and dP = dW * F
//   ds  = P * (dP - (D - dlse)), D_i = dout_i . out_i (= sum_j P_ij dP_ij)
//   dq  = scale * ds k,   dk += scale * ds^T q
// One task per leading index: dk and dv sum over that index's blocks.
void attention_backward_kernel(const KernelContext& c) {
  const AttentionGeometry g = attention_geometry(c, 7);
  const Tensor* mask = c.inputs.size() == 8 ? &c.inputs[7] : nullptr;
  const int64_t rows = block_rows(g);
  onednn::OneThread one_thread(on_one_core(c));
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    const AttentionData<T> data{c.inputs[0].data<T>(), c.inputs[1].data<T>(), c.inputs[2].data<T>(),
                                mask, g};
    const T* out = c.inputs[3].data<T>();
    const T* lse = c.inputs[4].data<T>();
    const T* grad_out = c.inputs[5].data<T>();
    const T* grad_lse = c.inputs[6].data<T>();
    T* dq = c.outputs[0].data<T>();
    T* dk = c.outputs[1].data<T>();
    T* dv = c.outputs[2].data<T>();
    const int64_t e = g.features, ev = g.value_features, s = g.keys;
    // Rows from one position to the next, in elements of each width.
    const int64_t step = g.row_step(), step_e = step * e, step_ev = step * ev;
    parallel_for(g.batch, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> p, dp, dropped;
      for (int64_t b = begin; b < end; ++b) {
        T* dk_b = dk + g.row(b, 0, s) * e;
        T* dv_b = dv + g.row(b, 0, s) * ev;
        const T* k_b = data.k + g.row(b, 0, s) * e;
        const T* v_b = data.v + g.row(b, 0, s) * ev;
        for (int64_t j = 0; j < s; ++j) {
          std::fill(dk_b + j * step_e, dk_b + j * step_e + e, T{0});
          std::fill(dv_b + j * step_ev, dv_b + j * step_ev + ev, T{0});
        }
        for (int64_t i0 = 0; i0 < g.queries; i0 += rows) {
          const int64_t height = std::min(rows, g.queries - i0);
          const int64_t n = g.visible_keys(i0 + height - 1);
          const int64_t first = g.row(b, i0, g.queries);  // The block's first row.
          if (n == 0) {
            for (int64_t r = 0; r < height; ++r) {
              std::fill(dq + first * e + r * step_e, dq + first * e + r * step_e + e, T{0});
            }
            continue;
          }
          p.resize(static_cast<size_t>(height * n));
          dp.resize(p.size());
          data.scores(b, i0, height, n, p.data());
          for (int64_t r = 0; r < height; ++r) {
            exp_row(p.data() + r * n, n, lse[first + r * step]);
          }
          const T* g_out = grad_out + first * ev;
          // dW; then, under dropout, dP = dW * F and W = P * F (in `dropped`).
          cpu::gemm(false, true, height, n, ev, T{1}, g_out, step_ev, v_b, step_ev, T{0}, dp.data(),
                    n);
          const T* w = p.data();
          if (g.dropout_p > 0) {
            dropped.resize(p.size());
            data.dropout_factors(b, i0, height, n, [&](int64_t k, T f) {
              dropped[k] = p[k] * f;
              dp[k] *= f;
            });
            w = dropped.data();
          }
          cpu::gemm(true, false, n, ev, height, T{1}, w, n, g_out, step_ev, T{1}, dv_b, step_ev);
          for (int64_t r = 0; r < height; ++r) {
            const T* o = out + (first + r * step) * ev;
            const T* go = g_out + r * step_ev;
            T d = 0;
            for (int64_t j = 0; j < ev; ++j) d += go[j] * o[j];
            d -= grad_lse[first + r * step];
            softmax_gradient_row(dp.data() + r * n, p.data() + r * n, n, d);
          }
          const auto scale = static_cast<T>(g.scale);
          cpu::gemm(false, false, height, e, n, scale, dp.data(), n, k_b, step_e, T{0},
                    dq + first * e, step_e);
          cpu::gemm(true, false, n, e, height, scale, dp.data(), n, data.q + first * e, step_e,
                    T{1}, dk_b, step_e);
        }
      }
    });
  });
}

// The mask gets no gradient: nn::scaled_dot_product_attention takes the
// composition of ops for a mask that requires one.
std::vector<Tensor> attention_gradient(const GradContext& c) {
  const Tensor &g_out = c.grad_outputs[0], &g_lse = c.grad_outputs[1];
  const size_t inputs = c.inputs.size();
  if (!g_out.defined() && !g_lse.defined()) return std::vector<Tensor>(inputs);
  std::vector<Tensor> args = {c.inputs[0],
                              c.inputs[1],
                              c.inputs[2],
                              c.outputs[0],
                              c.outputs[1],
                              g_out.defined() ? g_out : zeros_like(c.outputs[0]),
                              g_lse.defined() ? g_lse : zeros_like(c.outputs[1])};
  if (inputs == 4) args.push_back(c.inputs[3]);
  std::vector<Tensor> grads = nested_call("scaled_dot_product_attention_backward", args, c.attrs);
  grads.resize(inputs);
  return grads;
}

std::vector<AttrSpec> attention_attrs() {
  return {required("scale", 0.0), optional("causal", false), optional("dropout_p", 0.0),
          optional("seed", int64_t{0}), optional("heads", int64_t{0})};
}

}  // namespace

void register_attention_ops(Registry& registry) {
  registry.add({.name = "scaled_dot_product_attention",
                .num_inputs = kVariadic,
                .num_outputs = 2,
                .attrs = attention_attrs(),
                .infer = infer_attention,
                .cpu = attention_kernel,
                .gradient = attention_gradient,
                .doc = "(query, key, value[, mask]) -> (softmax(scale q k^T + mask) v, the "
                       "scores' logsumexp), blocked, dropout on the weights",
                .uses_all_cores = true,
                .one_core = attention_on_one_core,
                .work = attention_work});
  registry.add({.name = "scaled_dot_product_attention_backward",
                .num_inputs = kVariadic,
                .num_outputs = 3,
                .attrs = attention_attrs(),
                .infer = infer_attention_backward,
                .cpu = attention_backward_kernel,
                .differentiable = false,
                .doc = "gradient of scaled_dot_product_attention: (query, key, value, out, lse, "
                       "grad_out, grad_lse[, mask]) -> grad_query, grad_key, grad_value",
                .uses_all_cores = true,
                .one_core = attention_on_one_core,
                .work = attention_work});
}

}  // namespace tandem::kernels
