// Attention and the transformer encoder (eager/nn/attention.h,
// eager/nn/transformer.h): scaled_dot_product_attention against a plain loop
// in float64 and against central differences; MultiheadAttention against the
// same loop applied to its own weights, and its masks against removing the
// keys they hide; the encoder eager, hybridized, and exported then loaded,
// at the traced batch size and another. (tests/difftest draws random models
// with encoder layers and checks them in every mode as well.)
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "serialization/model.h"
#include "tests/eager/float64_values.h"
#include "tests/error_of.h"

namespace tandem {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

using testing::expect_near;
using testing::Values;
using testing::values_of;

Tensor randn64(const Dims& shape) { return randn(shape, DType::kFloat64); }

// softmax(q k^T * scale + mask) v for q [B, L, E], k [B, S, E], v [B, S, F]
// (B folds every leading axis); `allowed(b, i, j)` false hides key j from
// query i, `added(b, i, j)` is added to the score.
template <class Allowed, class Added>
Values attention_loop(const Values& q, const Values& k, const Values& v, int64_t batches,
                      int64_t queries, int64_t keys, int64_t features, int64_t out_features,
                      double scale, Allowed allowed, Added added) {
  Values out(batches * queries * out_features, 0);
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      Values score(keys, -std::numeric_limits<double>::infinity());
      double top = score[0];
      for (int64_t j = 0; j < keys; ++j) {
        if (!allowed(b, i, j)) continue;
        double dot = 0;
        for (int64_t e = 0; e < features; ++e) {
          dot += q[(b * queries + i) * features + e] * k[(b * keys + j) * features + e];
        }
        score[j] = dot * scale + added(b, i, j);
        top = std::max(top, score[j]);
      }
      double total = 0;
      for (double& s : score) total += (s = std::exp(s - top));
      for (int64_t j = 0; j < keys; ++j) {
        for (int64_t f = 0; f < out_features; ++f) {
          out[(b * queries + i) * out_features + f] +=
              score[j] / total * v[(b * keys + j) * out_features + f];
        }
      }
    }
  }
  return out;
}

auto everywhere = [](int64_t, int64_t, int64_t) { return true; };
auto nothing = [](int64_t, int64_t, int64_t) { return 0.0; };

TEST(ScaledDotProductAttention, MatchesTheLoop) {
  manual_seed(1);
  Tensor q = randn64({2, 3, 4, 5}), k = randn64({2, 3, 6, 5}), v = randn64({2, 3, 6, 7});
  Values want = attention_loop(values_of(q), values_of(k), values_of(v), 6, 4, 6, 5, 7,
                               1 / std::sqrt(5.0), everywhere, nothing);
  Tensor y = nn::scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(y.shape(), Shape({2, 3, 4, 7}));
  expect_near(values_of(y), want, 1e-12);
}

TEST(ScaledDotProductAttention, CausalMasksAndScale) {
  manual_seed(2);
  Tensor q = randn64({2, 4, 3}), k = randn64({2, 6, 3}), v = randn64({2, 6, 2});
  const auto causal = [](int64_t, int64_t i, int64_t j) { return j <= i; };
  expect_near(
      values_of(nn::scaled_dot_product_attention(q, k, v, {}, 0, true, 0.5)),
      attention_loop(values_of(q), values_of(k), values_of(v), 2, 4, 6, 3, 2, 0.5, causal, nothing),
      1e-12);

  // A bool mask (true: may attend), broadcast over the batch, with causal.
  std::vector<bool> allowed_bits;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) allowed_bits.push_back((i + j) % 3 != 1 || j == 0);
  }
  Tensor bool_mask = Tensor::from_vector(allowed_bits, {4, 6});
  const auto both = [&](int64_t, int64_t i, int64_t j) {
    return j <= i && allowed_bits[i * 6 + j];
  };
  expect_near(values_of(nn::scaled_dot_product_attention(q, k, v, bool_mask, 0, true)),
              attention_loop(values_of(q), values_of(k), values_of(v), 2, 4, 6, 3, 2,
                             1 / std::sqrt(3.0), both, nothing),
              1e-12);

  // A float mask of the batch's own, added to the scores.
  Tensor added = randn64({2, 1, 6});
  Values added_values = values_of(added);
  expect_near(
      values_of(nn::scaled_dot_product_attention(q, k, v, added)),
      attention_loop(values_of(q), values_of(k), values_of(v), 2, 4, 6, 3, 2, 1 / std::sqrt(3.0),
                     everywhere,
                     [&](int64_t b, int64_t, int64_t j) { return added_values[b * 6 + j]; }),
      1e-12);
}

TEST(ScaledDotProductAttention, GradientsMatchCentralDifferences) {
  manual_seed(3);
  std::vector<Tensor> in = {randn64({2, 3, 4}), randn64({2, 5, 4}), randn64({2, 5, 3})};
  Tensor cotangent = randn64({2, 3, 3});
  const auto objective = [&](const std::vector<Tensor>& x) {
    return sum(mul(nn::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0, true), cotangent));
  };
  std::vector<Tensor> leaves;
  for (const Tensor& t : in) leaves.push_back(cast(t, DType::kFloat64).requires_grad_());
  objective(leaves).backward();
  for (size_t input = 0; input < in.size(); ++input) {
    Values base = values_of(in[input]), grad = values_of(leaves[input].grad());
    for (size_t e = 0; e < base.size(); ++e) {
      const double h = 1e-6;
      std::vector<Tensor> plus = in, minus = in;
      Values up = base, down = base;
      up[e] += h, down[e] -= h;
      plus[input] = Tensor::from_vector(up, in[input].shape());
      minus[input] = Tensor::from_vector(down, in[input].shape());
      const double numeric =
          (objective(plus).item<double>() - objective(minus).item<double>()) / (2 * h);
      EXPECT_NEAR(grad[e], numeric, 1e-6) << "input " << input << ", element " << e;
    }
  }
}

// The op that made `y` ("matmul" for the composition of ops).
std::string made_by(const Tensor& y) { return y.impl_ptr()->autograd->grad_fn->display_name(); }

// scaled_dot_product_attention of copies of q, k and v with `mask`: the op
// that made its output, then the output and the gradients of q, k and v of
// sum(output * cotangent).
std::pair<std::string, std::vector<Values>> attend(const Tensor& q, const Tensor& k,
                                                   const Tensor& v, const Tensor& mask, bool causal,
                                                   const Tensor& cotangent) {
  std::vector<Tensor> leaves = {add(q, 0.0).requires_grad_(), add(k, 0.0).requires_grad_(),
                                add(v, 0.0).requires_grad_()};
  Tensor y = nn::scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], mask, 0, causal);
  const std::string op = made_by(y);
  sum(mul(y, cotangent)).backward();
  std::vector<Values> result = {values_of(y)};
  for (const Tensor& leaf : leaves) result.push_back(values_of(leaf.grad()));
  return {op, result};
}

// The fused kernel (several blocks of queries, causal, key padding, float32)
// against the composition of ops, which a mask that requires a gradient
// selects: the same outputs and gradients, and the float mask's gradient.
TEST(ScaledDotProductAttention, FusedKernelMatchesTheComposition) {
  manual_seed(7);
  Tensor q = randn({2, 3, 150, 16}), k = randn({2, 3, 300, 16}), v = randn({2, 3, 300, 8});
  std::vector<bool> keep(600, true);
  for (int64_t j = 280; j < 300; ++j) keep[300 + j] = false;  // Batch 1's last 20 keys.
  Tensor allowed = Tensor::from_vector(keep, {2, 1, 1, 300});
  Tensor added = where(allowed, full({}, 0.0), full({}, -INFINITY));
  Tensor cotangent = randn({2, 3, 150, 8});
  const auto [fused_op, fused] = attend(q, k, v, allowed, true, cotangent);
  Tensor learnable = add(added, 0.0).requires_grad_();
  const auto [composed_op, composed] = attend(q, k, v, learnable, true, cotangent);
  EXPECT_EQ(fused_op, "scaled_dot_product_attention");
  EXPECT_EQ(composed_op, "matmul");
  for (size_t k = 0; k < fused.size(); ++k) {
    SCOPED_TRACE(k == 0 ? "output" : "gradient of input " + std::to_string(k - 1));
    expect_near(fused[k], composed[k], 2e-5);
  }
  EXPECT_TRUE(learnable.grad().defined());
}

// Random shapes, masks and causality in float64, the fused kernel against
// the composition of ops (which a float mask that requires a gradient
// selects): sequences of 1 to 1100 keys (the kernel's blocks of queries get
// shorter as keys grow: two or more blocks from 66 queries at 1000 keys),
// more queries than keys and fewer, one feature, with and without a mask.
TEST(ScaledDotProductAttention, FusedKernelMatchesTheCompositionOnRandomShapes) {
  std::mt19937 draw(12);
  const auto pick = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(draw);
  };
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t batch = pick(1, 2), heads = pick(1, 3), features = pick(1, 5),
                  value_features = pick(1, 4);
    const bool long_keys = trial % 6 == 5;
    const int64_t queries = long_keys ? pick(60, 140) : pick(1, 9);
    const int64_t keys = long_keys ? pick(900, 1100) : pick(1, 9);
    const bool causal = pick(0, 1) == 1, masked = pick(0, 2) > 0;
    SCOPED_TRACE(str_cat("trial ", trial, ": [", batch, ", ", heads, "] L ", queries, " S ", keys,
                         " E ", features, " Ev ", value_features, causal ? " causal" : "",
                         masked ? " masked" : ""));
    manual_seed(100 + trial);
    Tensor q = randn64({batch, heads, queries, features});
    Tensor k = randn64({batch, heads, keys, features});
    Tensor v = randn64({batch, heads, keys, value_features});
    // Key padding per sample, never hiding key 0, so that no row is empty.
    std::vector<bool> keep(static_cast<size_t>(batch * keys), true);
    for (size_t j = 0; j < keep.size(); ++j) keep[j] = j % keys == 0 || pick(0, 3) > 0;
    Tensor allowed = Tensor::from_vector(keep, {batch, 1, 1, keys});
    Tensor cotangent = randn64({batch, heads, queries, value_features});
    // The same mask added to the scores (0 or -inf), or one that hides
    // nothing, needing a gradient so that the call composes ops.
    Tensor added = masked ? where(allowed, full({}, 0.0, DType::kFloat64),
                                  full({}, -INFINITY, DType::kFloat64))
                          : full({1, 1, 1, keys}, 0.0, DType::kFloat64);
    const auto [fused_op, fused] = attend(q, k, v, masked ? allowed : Tensor(), causal, cotangent);
    const auto [composed_op, composed] =
        attend(q, k, v, add(added, 0.0).requires_grad_(), causal, cotangent);
    ASSERT_EQ(fused_op, "scaled_dot_product_attention");
    ASSERT_EQ(composed_op, "matmul");
    for (size_t i = 0; i < fused.size(); ++i) expect_near(fused[i], composed[i], 1e-10);
  }
}

// Dropout inside the kernel: each weight is kept with probability 1 - p and
// scaled by 1 / (1 - p), so with equal scores and unit values every output
// is the mean of S draws of that factor; the gradient of q is then exactly
// zero (equal scores stay equal) and v's sums the kept factors.
TEST(ScaledDotProductAttention, DropoutKeepsTheRateAndItsMaskInTheBackward) {
  manual_seed(8);
  const double p = 0.25;
  Tensor q = zeros({4, 64, 8}).requires_grad_(), k = zeros({4, 512, 8});
  Tensor v = ones({4, 512, 1}).requires_grad_();
  Tensor y = nn::scaled_dot_product_attention(q, k, v, {}, p);
  EXPECT_EQ(made_by(y), "scaled_dot_product_attention");
  Values out = values_of(y);
  double mean = 0;
  for (double o : out) mean += o / static_cast<double>(out.size());
  // Each output averages 512 factors of mean 1 and variance p / (1 - p).
  EXPECT_NEAR(mean, 1.0, 6 * std::sqrt(p / (1 - p) / (512.0 * 256)));
  sum(y).backward();
  EXPECT_THAT(values_of(q.grad()), ::testing::Each(::testing::DoubleNear(0, 1e-6)));
  // dv[j] = sum over queries of the weight 1/512 times the factor, so the
  // total is the sum of every output.
  double total = 0;
  for (double g : values_of(v.grad())) total += g;
  EXPECT_NEAR(total, mean * static_cast<double>(out.size()), 1e-2);
  // Another call draws another mask.
  EXPECT_NE(values_of(nn::scaled_dot_product_attention(q, k, v, {}, p)), out);
}

TEST(ScaledDotProductAttention, RefusesShapesThatDoNotFit) {
  Tensor q = randn({2, 4, 3}), k = randn({2, 6, 3}), v = randn({2, 6, 2});
  EXPECT_THAT(error_of([&] {
                nn::scaled_dot_product_attention(q, randn({2, 6, 4}), v);
              }),
              HasSubstr("query and key must have the same features"));
  EXPECT_THAT(error_of([&] {
                nn::scaled_dot_product_attention(q, k, randn({2, 5, 2}));
              }),
              HasSubstr("same sequence length"));
  EXPECT_THAT(error_of([&] {
                nn::scaled_dot_product_attention(q, k, v, ones({4, 5}));
              }),
              HasSubstr("attn_mask [4, 5] does not broadcast"));
  EXPECT_THAT(error_of([&] {
                nn::scaled_dot_product_attention(q, k, v, ones({4, 6}, DType::kInt64));
              }),
              HasSubstr("attn_mask must be bool"));
  EXPECT_THAT(error_of([&] { nn::scaled_dot_product_attention(q, k, v, {}, 1.0); }),
              HasSubstr("dropout_p must be in [0, 1)"));
}

// The module's answer by hand: the projections, the loop per head, the output
// projection, all in float64 from the module's own weights.
Values attention_by_hand(nn::MultiheadAttention& attn, const Tensor& query, const Tensor& key,
                         const Tensor& value, const std::vector<bool>& padding = {}) {
  const int64_t e = attn.options().embed_dim, heads = attn.options().num_heads, d = e / heads;
  const int64_t batch = query.shape()[0], queries = query.shape()[1], keys = key.shape()[1];
  Values w = values_of(attn.in_proj_weight()), b = values_of(attn.in_proj_bias());
  const auto project = [&](const Tensor& x, int64_t part) {
    Values in = values_of(x), out(in.size());
    for (size_t row = 0; row < in.size() / e; ++row) {
      for (int64_t o = 0; o < e; ++o) {
        double acc = b[part * e + o];
        for (int64_t i = 0; i < e; ++i) acc += in[row * e + i] * w[(part * e + o) * e + i];
        out[row * e + o] = acc;
      }
    }
    return out;
  };
  Values q = project(query, 0), k = project(key, 1), v = project(value, 2);
  // [batch, seq, heads, d] -> [batch, heads, seq, d]
  const auto heads_first = [&](const Values& x, int64_t seq) {
    Values out(x.size());
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < d; ++i)
            out[((n * heads + h) * seq + s) * d + i] = x[((n * seq + s) * heads + h) * d + i];
    return out;
  };
  const auto not_padding = [&](int64_t bh, int64_t, int64_t j) {
    return padding.empty() || !padding[(bh / heads) * keys + j];
  };
  Values y = attention_loop(heads_first(q, queries), heads_first(k, keys), heads_first(v, keys),
                            batch * heads, queries, keys, d, d, 1 / std::sqrt(double(d)),
                            not_padding, nothing);
  Values merged(y.size());
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < queries; ++s)
        for (int64_t i = 0; i < d; ++i)
          merged[((n * queries + s) * heads + h) * d + i] =
              y[((n * heads + h) * queries + s) * d + i];
  Values wo = values_of(attn.out_proj()->weight()), bo = values_of(attn.out_proj()->bias());
  Values out(merged.size());
  for (size_t row = 0; row < merged.size() / e; ++row) {
    for (int64_t o = 0; o < e; ++o) {
      double acc = bo[o];
      for (int64_t i = 0; i < e; ++i) acc += merged[row * e + i] * wo[o * e + i];
      out[row * e + o] = acc;
    }
  }
  return out;
}

std::shared_ptr<nn::MultiheadAttention> float64_attention(int64_t e, int64_t heads,
                                                          bool batch_first = true) {
  auto attn = std::make_shared<nn::MultiheadAttention>(nn::MultiheadAttentionOptions{
      .embed_dim = e, .num_heads = heads, .batch_first = batch_first, .dtype = DType::kFloat64});
  // Non-zero biases, so that a bias used in the wrong place shows.
  nn::init::uniform_(attn->in_proj_bias(), -0.5, 0.5);
  nn::init::uniform_(attn->out_proj()->bias(), -0.5, 0.5);
  return attn;
}

TEST(MultiheadAttention, HasTorchsParameters) {
  nn::MultiheadAttention attn(8, 2);
  std::vector<std::string> names;
  for (const auto& [name, t] : attn.named_parameters()) {
    names.push_back(name + t.shape().to_string());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("in_proj_weight[24, 8]", "in_proj_bias[24]",
                                            "out_proj.weight[8, 8]", "out_proj.bias[8]"));
  EXPECT_THAT(values_of(attn.in_proj_bias()), ::testing::Each(0.0));
  EXPECT_THAT(values_of(attn.out_proj()->bias()), ::testing::Each(0.0));
  EXPECT_THAT(error_of([] { nn::MultiheadAttention(10, 4); }), HasSubstr("divisible"));
}

TEST(MultiheadAttention, SelfAndCrossAttentionMatchTheLoop) {
  manual_seed(4);
  auto attn = float64_attention(8, 2);
  Tensor x = randn64({3, 5, 8}), memory = randn64({3, 7, 8});
  expect_near(values_of((*attn)(x)), attention_by_hand(*attn, x, x, x), 1e-12);
  expect_near(values_of(attn->forward(x, memory, memory)),
              attention_by_hand(*attn, x, memory, memory), 1e-12);
  // The fused self-attention path and the three-projection path agree.
  expect_near(values_of(attn->forward(x, add(x, 0.0), mul(x, 1.0))), values_of((*attn)(x)), 1e-12);
}

TEST(MultiheadAttention, MasksHideWhatTheySay) {
  manual_seed(5);
  auto attn = float64_attention(6, 3);
  Tensor x = randn64({2, 4, 6}), memory = randn64({2, 5, 6});
  // Padding: the last two keys of sample 0 and the last one of sample 1.
  std::vector<bool> padding = {false, false, false, true, true, false, false, false, false, true};
  Tensor padded = Tensor::from_vector(padding, {2, 5});
  Values want = attention_by_hand(*attn, x, memory, memory, padding);
  expect_near(values_of(attn->forward(x, memory, memory, {}, padded)), want, 1e-12);
  // The same as a float mask, and as a 3-d attn_mask per batch and head.
  Tensor minus_inf =
      where(padded, full({}, -INFINITY, DType::kFloat64), full({}, 0.0, DType::kFloat64));
  expect_near(values_of(attn->forward(x, memory, memory, {}, minus_inf)), want, 1e-12);
  Tensor per_head = reshape(expand(reshape(padded, {2, 1, 1, 5}), {2, 3, 4, 5}), {6, 4, 5});
  expect_near(values_of(attn->forward(x, memory, memory, per_head)), want, 1e-12);
  // attn_mask true = may not attend: the upper triangle is is_causal.
  std::vector<bool> future;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) future.push_back(j > i);
  }
  Tensor future_mask = Tensor::from_vector(future, {4, 4});
  expect_near(values_of(attn->forward(x, x, x, future_mask)),
              values_of(attn->forward(x, x, x, {}, {}, true)), 1e-12);
  EXPECT_THAT(error_of([&] {
                attn->forward(x, memory, memory, Tensor::from_vector(future, {4, 4}));
              }),
              HasSubstr("attn_mask must be [4, 5]"));
  EXPECT_THAT(error_of([&] {
                attn->forward(x, memory, memory, {}, ones({2, 4}, DType::kBool));
              }),
              HasSubstr("key_padding_mask must be [batch, S] = [2, 5]"));
}

TEST(MultiheadAttention, SequenceFirstIsTheTransposedLayout) {
  manual_seed(6);
  auto first = float64_attention(8, 4);
  auto seq_first = float64_attention(8, 4, /*batch_first=*/false);
  seq_first->load_state_dict(first->state_dict());
  Tensor x = randn64({2, 5, 8});
  expect_near(values_of(transpose((*seq_first)(transpose(x, {1, 0, 2})), {1, 0, 2})),
              values_of((*first)(x)), 1e-12);
}

nn::TransformerLayerOptions small_layer(bool norm_first, bool causal) {
  return {.d_model = 8,
          .nhead = 2,
          .dim_feedforward = 16,
          .dropout = 0.1,
          .activation =
              norm_first ? nn::TransformerActivation::kGELU : nn::TransformerActivation::kReLU,
          .norm_first = norm_first,
          .causal = causal};
}

TEST(TransformerEncoder, HasTorchsNames) {
  nn::TransformerEncoder encoder(small_layer(false, false), 2, /*final_norm=*/true);
  std::vector<std::string> names;
  for (const auto& [name, t] : encoder.named_parameters()) names.push_back(name);
  EXPECT_EQ(names.size(), 2 * 12 + 2);
  EXPECT_THAT(names, ::testing::IsSupersetOf(
                         {"layers.0.self_attn.in_proj_weight", "layers.0.self_attn.out_proj.bias",
                          "layers.1.linear1.weight", "layers.1.linear2.bias",
                          "layers.1.norm1.weight", "layers.0.norm2.bias", "norm.weight"}));
}

TEST(TransformerEncoder, ErrorsNameTheLayerPath) {
  nn::TransformerEncoder encoder(small_layer(false, false), 2);
  const std::string message = error_of([&] { encoder(randn({2, 3, 6})); });
  EXPECT_THAT(message, HasSubstr("MultiheadAttention(embed_dim=8)"));
  EXPECT_THAT(message, HasSubstr("layers.0.self_attn"));
}

TEST(TransformerEncoder, EveryParameterLearns) {
  manual_seed(7);
  auto encoder = std::make_shared<nn::TransformerEncoder>(small_layer(true, true), 2, true);
  Tensor loss = mean(square((*encoder)(randn({2, 5, 8}))));
  loss.backward();
  for (const auto& [name, p] : encoder->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(max(abs(p.grad())).item<float>(), 0) << name;
  }
}

// The README's language model: tokens in, logits per position out; a
// position's logits do not depend on later tokens.
TEST(TransformerEncoder, ACausalLanguageModelSeesOnlyThePast) {
  manual_seed(9);
  const int64_t vocab = 11;
  nn::TransformerLayerOptions layer{
      .d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.1, .causal = true};
  auto lm = std::make_shared<nn::Sequential>(nn::Embedding(vocab, 8),
                                             nn::TransformerEncoder(layer, /*num_layers=*/2),
                                             nn::Linear(8, vocab));
  lm->eval();
  Tensor tokens = Tensor::from_vector<int64_t>({1, 4, 2, 9, 3, 7, 0, 5}, {2, 4});
  Tensor changed = Tensor::from_vector<int64_t>({1, 4, 2, 10, 3, 7, 0, 6}, {2, 4});
  Tensor logits = (*lm)(tokens);
  EXPECT_EQ(logits.shape(), Shape({2, 4, vocab}));
  // Only the last position's token changed: the first three keep their logits.
  expect_near(values_of(slice(logits, 1, 0, 3)), values_of(slice((*lm)(changed), 1, 0, 3)), 1e-6);
  EXPECT_GT(max(abs(sub(slice(logits, 1, 3, 4), slice((*lm)(changed), 1, 3, 4)))).item<float>(),
            1e-4);
}

// Eager, hybridized and exported-then-loaded give one answer, at the traced
// batch size and another, for both norm placements and with a causal mask.
TEST(TransformerEncoder, OneAnswerInEveryMode) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-attention-", ::getpid());
  fs::create_directories(dir);
  for (bool norm_first : {false, true}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(str_cat("norm_first ", norm_first, ", causal ", causal));
      manual_seed(8);
      auto encoder =
          std::make_shared<nn::TransformerEncoder>(small_layer(norm_first, causal), 2, norm_first);
      encoder->eval();
      NoGradGuard no_grad;
      Tensor traced = randn({2, 5, 8}), other = randn({3, 5, 8});
      Values eager_traced = values_of((*encoder)(traced)),
             eager_other = values_of((*encoder)(other));
      encoder->hybridize();
      expect_near(values_of((*encoder)(traced)), eager_traced, 1e-5);
      expect_near(values_of((*encoder)(traced)), eager_traced, 1e-5);  // A replay.
      const std::string path = (dir / str_cat("encoder", norm_first, causal)).string();
      encoder->export_model(path);
      LoadedModel loaded = load(path);
      expect_near(values_of(loaded.run({traced})[0]), eager_traced, 1e-5);
      expect_near(values_of(loaded.run({other})[0]), eager_other, 1e-5);
      expect_near(values_of((*encoder)(other)), eager_other, 1e-5);
    }
  }
  fs::remove_all(dir);
}

// The decoder layer's wiring, computed from its own children: post-norm
// x1 = norm1(x + sa(x)), x2 = norm2(x1 + mha(x1, memory)), norm3(x2 +
// ff(x2)); pre-norm with each norm at the start of its block instead.
TEST(TransformerDecoder, LayerWiringIsTorchs) {
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(str_cat("norm_first ", norm_first));
    manual_seed(21);
    nn::TransformerDecoderLayer layer(small_layer(norm_first, /*causal=*/true));
    layer.eval();
    std::map<std::string, std::shared_ptr<nn::Module>> child;
    for (const auto& [name, m] : layer.named_children()) child[name] = m;
    auto& sa = dynamic_cast<nn::MultiheadAttention&>(*child["self_attn"]);
    auto& mha = dynamic_cast<nn::MultiheadAttention&>(*child["multihead_attn"]);
    const auto norm = [&](const char* name, const Tensor& x) { return child[name]->forward(x); };
    const auto ff = [&](const Tensor& x) {
      Tensor h = child["linear1"]->forward(x);
      return child["linear2"]->forward(norm_first ? gelu(h) : relu(h));
    };
    Tensor x = randn({2, 4, 8}), memory = randn({2, 6, 8});
    Tensor want;
    if (norm_first) {
      Tensor n1 = norm("norm1", x);
      Tensor x1 = add(x, sa.forward(n1, n1, n1, {}, {}, true));
      Tensor x2 = add(x1, mha.forward(norm("norm2", x1), memory, memory));
      want = add(x2, ff(norm("norm3", x2)));
    } else {
      Tensor x1 = norm("norm1", add(x, sa.forward(x, x, x, {}, {}, true)));
      Tensor x2 = norm("norm2", add(x1, mha.forward(x1, memory, memory)));
      want = norm("norm3", add(x2, ff(x2)));
    }
    expect_near(values_of(layer.forward(x, memory)), values_of(want), 1e-6);
  }
}

TEST(TransformerDecoder, MasksReachTheirAttention) {
  manual_seed(22);
  nn::TransformerDecoder decoder(small_layer(false, /*causal=*/true), 2, true);
  decoder.eval();
  Tensor tgt = randn({2, 4, 8}), memory = randn({2, 6, 8});
  // Causal: position 2's output ignores the targets after it.
  Tensor changed = concat({slice(tgt, 1, 0, 3), randn({2, 1, 8})}, 1);
  expect_near(values_of(slice(decoder.forward(tgt, memory), 1, 0, 3)),
              values_of(slice(decoder.forward(changed, memory), 1, 0, 3)), 1e-6);
  // Memory padding: hiding the last two memory positions is removing them.
  std::vector<bool> padding(12, false);
  for (int i : {4, 5, 10, 11}) padding[static_cast<size_t>(i)] = true;
  nn::TransformerDecoderMasks masks{.memory_key_padding_mask =
                                        Tensor::from_vector(padding, {2, 6})};
  expect_near(values_of(decoder.forward(tgt, memory, masks)),
              values_of(decoder.forward(tgt, slice(memory, 1, 0, 4))), 1e-6);
}

TEST(Transformer, HasTorchsNamesAndRunsInEveryMode) {
  manual_seed(23);
  nn::TransformerLayerOptions layer = small_layer(false, /*causal=*/true);
  auto model = std::make_shared<nn::Transformer>(
      nn::TransformerOptions{.layer = layer, .num_encoder_layers = 2, .num_decoder_layers = 1});
  std::vector<std::string> names;
  for (const auto& [name, t] : model->named_parameters()) names.push_back(name);
  EXPECT_EQ(names.size(), 2 * 12 + 2 + 1 * 18 + 2);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"encoder.layers.1.self_attn.in_proj_weight",
                                              "encoder.norm.weight",
                                              "decoder.layers.0.multihead_attn.out_proj.weight",
                                              "decoder.layers.0.norm3.bias", "decoder.norm.bias"}));
  // The encoder ignores `causal`: a source position sees the whole source.
  EXPECT_FALSE(model->encoder()->layers()[0]->options().causal);
  EXPECT_TRUE(model->decoder()->layers()[0]->options().causal);

  model->eval();
  NoGradGuard no_grad;
  auto run = hybridize([&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{model->forward(in[0], in[1])};
  });
  Tensor src = randn({2, 5, 8}), tgt = randn({2, 3, 8});
  Tensor other_src = randn({4, 5, 8}), other_tgt = randn({4, 3, 8});
  Values eager = values_of(model->forward(src, tgt));
  Values eager_other = values_of(model->forward(other_src, other_tgt));
  expect_near(values_of(run({src, tgt})[0]), eager, 1e-5);
  expect_near(values_of(run({src, tgt})[0]), eager, 1e-5);  // A replay.
  EXPECT_EQ(run.stats().replays, 1);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-seq2seq-", ::getpid());
  fs::create_directories(dir);
  const nn::StateDict state = model->state_dict();
  run.export_model((dir / "seq2seq").string(),
                   std::vector<nn::StateDict::Entry>(state.begin(), state.end()));
  LoadedModel loaded = load((dir / "seq2seq").string());
  expect_near(values_of(loaded.run({src, tgt})[0]), eager, 1e-5);
  expect_near(values_of(loaded.run({other_src, other_tgt})[0]), eager_other, 1e-5);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
