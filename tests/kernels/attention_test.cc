// Rows for attention.cc (scaled_dot_product_attention and its backward) and
// its error messages. The reference loops over every (b, i, j) in double:
// the scores with the mask and causality, a max-shifted logsumexp, the
// weights with dropout's documented draw (AttentionGeometry::dropout_factor:
// draw (b * L + i) * S + j of the seed), and for the backward the textbook
// gradient of softmax(s) v, with no blocks and no recomputation.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "kernels/counter_rng.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Call {
  double scale = 0.5;
  bool causal = false;
  double dropout_p = 0;
  int64_t seed = 0;
  int64_t heads = 0;
  Attrs attrs() const {
    return {{"scale", scale},
            {"causal", causal},
            {"dropout_p", dropout_p},
            {"seed", seed},
            {"heads", heads}};
  }
};

// t with axes 1 and 2 swapped: [N, L, h, E] <-> [N, h, L, E], and lse's
// [N, L, h] <-> [N, h, L].
Tensor swap_axes_1_2(const Tensor& t) {
  const HostTensor host(t);
  Shape::Dims dims(host.shape.begin(), host.shape.end());
  std::swap(dims[1], dims[2]);
  return build(Shape(dims), t.dtype(), [&](const Index& at) {
    Index from = at;
    std::swap(from[1], from[2]);
    return host.at(from);
  });
}

// A call with heads split off ([N, L, h, E]) as the same call on [N, h, L,
// E]: `reference` of the swapped tensors (the first `swapped` inputs),
// its outputs swapped back.
template <class Reference>
std::vector<Tensor> with_heads_first(const Inputs& in, size_t swapped, Call call,
                                     Reference reference) {
  Inputs first = in;
  for (size_t k = 0; k < swapped; ++k) first[k] = swap_axes_1_2(in[k]);
  call.heads = 0;
  std::vector<Tensor> out = reference(first, call);
  for (Tensor& t : out) t = swap_axes_1_2(t);
  return out;
}

// The problem in plain numbers: [batch][L or S][features], the mask read at
// (b, i, j) through its broadcast shape.
struct Problem {
  Shape query_shape;
  int64_t batch = 1, queries = 0, keys = 0, features = 0, value_features = 0;
  HostTensor q, k, v;
  std::optional<HostTensor> mask;
  bool mask_is_bool = false;
  Call call;

  Problem(const Inputs& in, size_t mask_input, const Call& c)
      : query_shape(in[0].shape()), q(in[0]), k(in[1]), v(in[2]), call(c) {
    const int lead = query_shape.rank() - 2;
    for (int a = 0; a < lead; ++a) batch *= query_shape[a];
    queries = query_shape[lead];
    keys = in[1].shape()[lead];
    features = query_shape[lead + 1];
    value_features = in[2].shape()[lead + 1];
    if (in.size() > mask_input) {
      mask = HostTensor(in[mask_input]);
      mask_is_bool = in[mask_input].dtype() == DType::kBool;
    }
  }

  // (b, i, j) as an index into a tensor of `shape` (the query's rank), each
  // axis of size 1 read at 0.
  Index at(const Shape& shape, int64_t b, int64_t i, int64_t j) const {
    const int lead = shape.rank() - 2;
    Index index(static_cast<size_t>(shape.rank()));
    for (int a = lead - 1; a >= 0; --a) {
      index[a] = shape[a] == 1 ? 0 : b % query_shape[a];
      b /= query_shape[a];
    }
    index[lead] = shape[lead] == 1 ? 0 : i;
    index[lead + 1] = shape[lead + 1] == 1 ? 0 : j;
    return index;
  }
  double qv(int64_t b, int64_t i, int64_t e) const {
    return q.values[(b * queries + i) * features + e];
  }
  double kv(int64_t b, int64_t j, int64_t e) const {
    return k.values[(b * keys + j) * features + e];
  }
  double vv(int64_t b, int64_t j, int64_t e) const {
    return v.values[(b * keys + j) * value_features + e];
  }

  double score(int64_t b, int64_t i, int64_t j) const {
    if (call.causal && j > i) return -kInf;
    double dot = 0;
    for (int64_t e = 0; e < features; ++e) dot += qv(b, i, e) * kv(b, j, e);
    double s = call.scale * dot;
    if (mask) {
      const double m = mask->at(at(mask->shape, b, i, j));
      if (mask_is_bool) {
        if (m == 0) s = -kInf;
      } else {
        s += m;
      }
    }
    return s;
  }
  double lse(int64_t b, int64_t i) const {
    double shift = -kInf;
    for (int64_t j = 0; j < keys; ++j) shift = std::max(shift, score(b, i, j));
    double sum = 0;
    for (int64_t j = 0; j < keys; ++j) sum += std::exp(score(b, i, j) - shift);
    return shift + std::log(sum);
  }
  double drop(int64_t b, int64_t i, int64_t j) const {
    if (call.dropout_p == 0) return 1;
    const CounterRng rng(call.seed);
    const auto counter = static_cast<uint64_t>((b * queries + i) * keys + j);
    return rng.uniform(counter) >= call.dropout_p ? 1 / (1 - call.dropout_p) : 0;
  }
};

std::vector<Tensor> forward_reference(const Inputs& in, const Call& call) {
  if (call.heads > 0) return with_heads_first(in, 3, call, forward_reference);
  const Problem p(in, 3, call);
  std::vector<double> out, lse;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.queries; ++i) {
      const double l = p.lse(b, i);
      lse.push_back(l);
      for (int64_t e = 0; e < p.value_features; ++e) {
        double sum = 0;
        for (int64_t j = 0; j < p.keys; ++j) {
          sum += std::exp(p.score(b, i, j) - l) * p.drop(b, i, j) * p.vv(b, j, e);
        }
        out.push_back(sum);
      }
    }
  }
  Shape::Dims out_dims(p.query_shape.begin(), p.query_shape.end());
  out_dims.back() = p.value_features;
  Shape::Dims lse_dims(p.query_shape.begin(), p.query_shape.end() - 1);
  const DType dtype = in[0].dtype();
  return {result(out, Shape(out_dims), dtype), result(lse, Shape(lse_dims), dtype)};
}

// The gradients of <out, g_out> + <lse, g_lse> by the chain rule through
// s -> P = softmax(s) -> W = P * drop -> out = W v.
std::vector<Tensor> backward_reference(const Inputs& in, const Call& call) {
  if (call.heads > 0) return with_heads_first(in, 7, call, backward_reference);
  const Problem p(in, 7, call);
  const HostTensor g_out(in[5]), g_lse(in[6]);
  std::vector<double> dq(p.q.values.size()), dk(p.k.values.size()), dv(p.v.values.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.queries; ++i) {
      const double l = p.lse(b, i);
      const auto go = [&](int64_t e) {
        return g_out.values[(b * p.queries + i) * p.value_features + e];
      };
      std::vector<double> weight(p.keys), d_weight(p.keys);
      for (int64_t j = 0; j < p.keys; ++j) {
        weight[j] = std::exp(p.score(b, i, j) - l);
        for (int64_t e = 0; e < p.value_features; ++e) {
          dv[(b * p.keys + j) * p.value_features + e] += weight[j] * p.drop(b, i, j) * go(e);
          d_weight[j] += go(e) * p.vv(b, j, e) * p.drop(b, i, j);
        }
      }
      // softmax's Jacobian: ds_j = P_j (dP_j - sum_k P_k dP_k), plus lse's P_j.
      double inner = 0;
      for (int64_t j = 0; j < p.keys; ++j) inner += weight[j] * d_weight[j];
      for (int64_t j = 0; j < p.keys; ++j) {
        const double ds =
            weight[j] * (d_weight[j] - inner + g_lse.values[b * p.queries + i]) * call.scale;
        for (int64_t e = 0; e < p.features; ++e) {
          dq[(b * p.queries + i) * p.features + e] += ds * p.kv(b, j, e);
          dk[(b * p.keys + j) * p.features + e] += ds * p.qv(b, i, e);
        }
      }
    }
  }
  const DType dtype = in[0].dtype();
  return {result(dq, in[0].shape(), dtype), result(dk, in[1].shape(), dtype),
          result(dv, in[2].shape(), dtype)};
}

OpTestCase forward_row(std::string name, Inputs inputs, Call call) {
  return {.name = std::move(name),
          .op = "scaled_dot_product_attention",
          .inputs = std::move(inputs),
          .attrs = call.attrs(),
          .reference = [call](const Inputs& in) { return forward_reference(in, call); },
          .grad_inputs = {0, 1, 2}};
}

Tensor qkv(Shape shape, uint64_t seed) { return random_tensor(std::move(shape), seed); }

// A bool tensor of `shape`, element k true unless hidden(k).
Tensor bools(Shape shape, const std::function<bool(int64_t)>& hidden) {
  std::vector<double> values(static_cast<size_t>(shape.numel()));
  for (size_t k = 0; k < values.size(); ++k) values[k] = hidden(static_cast<int64_t>(k)) ? 0 : 1;
  return tensor_of(values, shape, DType::kBool);
}

TANDEM_OP_TEST_ROWS(attention) {
  std::vector<OpTestCase> rows;
  add_both(rows, forward_row("plain", {qkv({2, 3, 4}, 1), qkv({2, 5, 4}, 2), qkv({2, 5, 3}, 3)},
                             {.scale = 0.5}));
  add_both(rows, forward_row("causal_more_queries",
                             {qkv({2, 2, 5, 3}, 4), qkv({2, 2, 4, 3}, 5), qkv({2, 2, 4, 2}, 6)},
                             {.scale = 0.7, .causal = true}));
  add_both(rows, forward_row("causal_more_keys",
                             {qkv({1, 3, 2}, 7), qkv({1, 6, 2}, 8), qkv({1, 6, 3}, 9)},
                             {.scale = 1.1, .causal = true}));
  add_both(rows, forward_row("no_leading_axes", {qkv({4, 3}, 10), qkv({5, 3}, 11), qkv({5, 2}, 12)},
                             {.scale = 0.9}));
  // Key padding: [batch, 1, 1, S], hiding the last key of batch 1.
  add_both(rows, forward_row("bool_mask_broadcast",
                             {qkv({2, 2, 3, 4}, 13), qkv({2, 2, 5, 4}, 14), qkv({2, 2, 5, 3}, 15),
                              bools({2, 1, 1, 5}, [](int64_t k) { return k == 9 || k == 2; })},
                             {.scale = 0.5}));
  // A float mask over [L, S] shared by batch and heads, with causality.
  add_both(rows, forward_row("added_mask_causal",
                             {qkv({2, 2, 4, 3}, 16), qkv({2, 2, 4, 3}, 17), qkv({2, 2, 4, 2}, 18),
                              qkv({1, 1, 4, 4}, 19)},
                             {.scale = 0.6, .causal = true}));
  add_both(rows,
           forward_row("dropout", {qkv({2, 4, 3}, 20), qkv({2, 6, 3}, 21), qkv({2, 6, 5}, 22)},
                       {.scale = 0.5, .dropout_p = 0.3, .seed = 7}));
  // 300 queries: two blocks of rows, the second shorter.
  add_both(rows,
           forward_row("two_blocks", {qkv({1, 300, 2}, 23), qkv({1, 3, 2}, 24), qkv({1, 3, 2}, 25)},
                       {.scale = 0.8, .causal = true}));
  // 1100 keys: blocks of 16 rows, causal, float32 (the sgemm path) only.
  OpTestCase tall = forward_row("long_keys_f32",
                                {random_tensor({2, 40, 4}, 26, -1, 1, DType::kFloat32),
                                 random_tensor({2, 1100, 4}, 27, -1, 1, DType::kFloat32),
                                 random_tensor({2, 1100, 3}, 28, -1, 1, DType::kFloat32)},
                                {.scale = 0.5, .causal = true});
  tall.tolerance = 1e-5;
  tall.check_gradient = false;
  rows.push_back(tall);
  // Query 1 may attend to no key: NaN, as the composition of ops gives.
  OpTestCase hidden = forward_row("row_with_no_key",
                                  {qkv({3, 2}, 29), qkv({4, 2}, 30), qkv({4, 2}, 31),
                                   bools({3, 4}, [](int64_t k) { return k / 4 == 1; })},
                                  {.scale = 1});
  hidden.check_gradient = false;
  add_both(rows, hidden);
  OpTestCase no_keys =
      forward_row("no_keys", {qkv({2, 3, 2}, 32), qkv({2, 0, 2}, 33), qkv({2, 0, 4}, 34)}, {});
  no_keys.check_gradient = false;
  rows.push_back(no_keys);

  // Heads split off: [N, L, h, E], with a key padding mask and with an added
  // mask per head and dropout.
  add_both(rows, forward_row("heads_split_padding",
                             {qkv({2, 3, 2, 4}, 50), qkv({2, 5, 2, 4}, 51), qkv({2, 5, 2, 3}, 52),
                              bools({2, 1, 1, 5}, [](int64_t k) { return k == 9; })},
                             {.scale = 0.5, .causal = true, .heads = 2}));
  add_both(rows, forward_row("heads_split_added_mask_dropout",
                             {qkv({2, 4, 3, 2}, 53), qkv({2, 3, 3, 2}, 54), qkv({2, 3, 3, 4}, 55),
                              qkv({1, 3, 4, 3}, 56)},
                             {.scale = 0.8, .dropout_p = 0.2, .seed = 5, .heads = 3}));

  // The backward at the forward's own outputs, with cotangents on both.
  const auto backward_row = [&](std::string name, Inputs forward, Call call) {
    std::vector<Tensor> outs = forward_reference(forward, call);
    Inputs in = {forward[0],
                 forward[1],
                 forward[2],
                 outs[0],
                 outs[1],
                 random_tensor(outs[0].shape(), 40),
                 random_tensor(outs[1].shape(), 41)};
    if (forward.size() == 4) in.push_back(forward[3]);
    add_both(rows, {.name = std::move(name),
                    .op = "scaled_dot_product_attention_backward",
                    .inputs = in,
                    .attrs = call.attrs(),
                    .reference = [call](const Inputs& in) { return backward_reference(in, call); },
                    .check_gradient = false});
  };
  backward_row("plain", {qkv({2, 3, 4}, 1), qkv({2, 5, 4}, 2), qkv({2, 5, 3}, 3)}, {.scale = 0.5});
  backward_row("mask_causal_dropout",
               {qkv({2, 2, 5, 3}, 4), qkv({2, 2, 4, 3}, 5), qkv({2, 2, 4, 2}, 6),
                bools({2, 1, 1, 4}, [](int64_t k) { return k == 6; })},
               {.scale = 0.7, .causal = true, .dropout_p = 0.25, .seed = 3});
  backward_row("two_blocks", {qkv({1, 300, 2}, 23), qkv({1, 7, 2}, 24), qkv({1, 7, 3}, 25)},
               {.scale = 0.8, .causal = true});
  backward_row("heads_split",
               {qkv({2, 4, 3, 2}, 53), qkv({2, 3, 3, 2}, 54), qkv({2, 3, 3, 4}, 55),
                bools({2, 1, 1, 3}, [](int64_t k) { return k == 5; })},
               {.scale = 0.8, .causal = true, .dropout_p = 0.2, .seed = 5, .heads = 3});
  return rows;
}

std::string call_error(Inputs inputs, Call call = {}) {
  return error_of([&] { call1("scaled_dot_product_attention", inputs, call.attrs()); });
}

TEST(AttentionOpTest, NamesShapesThatDoNotFit) {
  EXPECT_THAT(call_error({qkv({2, 3, 4}, 1), qkv({2, 5, 3}, 2), qkv({2, 5, 3}, 3)}),
              HasSubstr("query and key must have the same features"));
  EXPECT_THAT(call_error({qkv({2, 3, 4}, 1), qkv({2, 5, 4}, 2), qkv({2, 4, 3}, 3)}),
              HasSubstr("key and value must have the same sequence length"));
  EXPECT_THAT(call_error({qkv({2, 3, 4}, 1), qkv({3, 5, 4}, 2), qkv({3, 5, 3}, 3)}),
              HasSubstr("must share the axes before [sequence, features]"));
  EXPECT_THAT(call_error({qkv({2, 3, 4}, 1), qkv({2, 5, 4}, 2), qkv({2, 5, 3}, 3), qkv({3, 5}, 4)}),
              HasSubstr("the mask [3, 5] must have the query's rank"));
  EXPECT_THAT(call_error({qkv({3, 4}, 1), qkv({5, 4}, 2), qkv({5, 3}, 3),
                          tensor_of({1, 2, 3}, {3, 1}, DType::kInt64)}),
              HasSubstr("the mask must be bool (true: may attend) or float64"));
  EXPECT_THAT(
      call_error({qkv({3, 4}, 1), qkv({5, 4}, 2), qkv({5, 3}, 3)}, {.scale = 1, .dropout_p = 1}),
      HasSubstr("dropout_p must be in [0, 1), got 1"));
  EXPECT_THAT(call_error({qkv({3, 4}, 1), qkv({5, 4}, 2), qkv({5, 3}, 3)}, {.scale = kInf}),
              HasSubstr("scale must be finite"));
  EXPECT_THAT(call_error({qkv({2, 3, 2, 4}, 1), qkv({2, 5, 3, 4}, 2), qkv({2, 5, 2, 3}, 3)},
                         {.scale = 1, .heads = 2}),
              HasSubstr("with heads = 2, query, key and value must be [N, sequence, 2, "
                        "features], got query [2, 3, 2, 4], key [2, 5, 3, 4]"));
}

}  // namespace
}  // namespace tandem::kernels::testing
