// ONNX's TfIdfVectorizer as Tandem's gathers, comparisons and sums: for
// each n-gram length and skip, every window of the input is gathered at
// once ([B, windows, n]), compared with every pooled n-gram of that length
// ([pool, n]), and the full matches counted per row; one matrix product then
// places (and weighs) the counts at the n-grams' output indices.
//
// As ONNX defines it: the pool holds the n-grams of each length one after
// another (ngram_counts gives where each length starts); an n-gram with
// skip s takes every (s + 1)-th element; skips run from 0 to
// max_skip_count for n >= 2, and unigrams count once; mode TF gives the
// counts, IDF the weights of the n-grams present, TFIDF both multiplied.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

void convert_tfidf_vectorizer(Node& n) {
  const DType dtype = n.dtype(0);
  if (dtype != DType::kInt64 && dtype != DType::kInt32) {
    n.refuse("only integer inputs are supported (Tandem has no string tensors)");
  }
  const Shape xs = n.shape(0);
  if (xs.rank() != 1 && xs.rank() != 2) n.refuse("the input must be [C] or [B, C]");
  const OnnxValue x = reshape(n, cast(n, n.input(0), DType::kInt64),
                              {xs.rank() == 1 ? 1 : xs[0], xs[xs.rank() - 1]});
  const int64_t batch = n.meta(x).shape[0], length = n.meta(x).shape[1];
  const int64_t min_n = n.attr_int("min_gram_length", 0), max_n = n.attr_int("max_gram_length", 0);
  const int64_t max_skip = n.attr_int("max_skip_count", 0);
  const std::string mode = n.attr_string("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") n.refuse(str_cat("mode '", mode, "'"));
  const Ints pool = n.attr_ints("pool_int64s").value_or(Ints{});
  if (n.attr("pool_strings") != nullptr) n.refuse("string pools are not supported");
  const Ints starts = n.attr_ints("ngram_counts").value_or(Ints{});
  const Ints indexes = n.attr_ints("ngram_indexes").value_or(Ints{});
  const std::vector<float> weights = n.attr_floats("weights").value_or(std::vector<float>{});
  if (min_n < 1 || max_n < min_n || max_n > int64_t(starts.size()) || max_skip < 0 ||
      max_skip > length) {
    n.refuse("min/max_gram_length, max_skip_count or ngram_counts are inconsistent");
  }
  // The pool's n-grams of each length, in pool order.
  int64_t ngrams = 0;
  std::vector<int64_t> count(starts.size());
  for (size_t g = 0; g < starts.size(); ++g) {
    const int64_t end = g + 1 < starts.size() ? starts[g + 1] : int64_t(pool.size());
    const int64_t size = int64_t(g + 1);
    if (starts[g] < 0 || end < starts[g] || end > int64_t(pool.size()) ||
        (end - starts[g]) % size != 0) {
      n.refuse(str_cat("ngram_counts does not split the pool into ", size, "-grams"));
    }
    count[g] = (end - starts[g]) / size;
    ngrams += count[g];
  }
  if (ngrams == 0) n.refuse("the pool holds no n-grams");
  if (int64_t(indexes.size()) != ngrams ||
      (!weights.empty() && int64_t(weights.size()) != ngrams)) {
    n.refuse(
        str_cat("ngram_indexes and weights must have one entry per pooled n-gram (", ngrams, ")"));
  }
  int64_t outputs = 0;
  for (int64_t i : indexes) {
    if (i < 0 || i >= kMaxHostElements) n.refuse(str_cat("ngram index ", i, " is out of range"));
    outputs = std::max(outputs, i + 1);
  }
  check_host_count(n, checked_mul(ngrams, outputs, "the placement"), "the placement");
  // Per n-gram, the number of its occurrences in each row: [B, ngrams].
  std::vector<OnnxValue> counts;
  for (int64_t g = 1; g <= int64_t(starts.size()); ++g) {
    const int64_t p = count[size_t(g - 1)];
    if (p == 0) continue;
    if (g < min_n || g > max_n) {
      counts.push_back(n.op(kernels::full_op(),
                            {{"shape", Ints{batch, p}}, {"dtype", DType::kInt64}, {"value", 0.0}},
                            {}));
      continue;
    }
    const Ints grams(pool.begin() + starts[size_t(g - 1)],
                     pool.begin() + starts[size_t(g - 1)] + p * g);
    const OnnxValue pooled = n.constant(Tensor::from_vector<int64_t>(grams, Shape{1, 1, p, g}));
    OnnxValue found =
        n.op(kernels::full_op(),
             {{"shape", Ints{batch, p}}, {"dtype", DType::kInt64}, {"value", 0.0}}, {});
    for (int64_t skip = 0; skip <= (g == 1 ? 0 : max_skip); ++skip) {
      const int64_t windows = length - (g - 1) * (skip + 1);
      if (windows <= 0) break;
      check_host_count(n, checked_mul(windows, g, "the windows"), "the windows");
      Ints at;
      for (int64_t t = 0; t < windows; ++t) {
        for (int64_t k = 0; k < g; ++k) at.push_back(t + k * (skip + 1));
      }
      const OnnxValue gathered =
          n.op(kernels::take_op(), {{"axis", int64_t{1}}},
               {x, n.constant(Tensor::from_vector<int64_t>(at, Shape{windows, g}))});
      const OnnxValue equal =
          n.op(kernels::eq_op(), {}, {reshape(n, gathered, {batch, windows, 1, g}), pooled});
      const OnnxValue matches = n.op(kernels::min_op(), {{"axes", Ints{3}}, {"keepdims", false}},
                                     {cast(n, equal, DType::kInt64)});
      found = ew2<ew::Add>(
          n, found, n.op(kernels::sum_op(), {{"axes", Ints{1}}, {"keepdims", false}}, {matches}));
    }
    counts.push_back(found);
  }
  OnnxValue tf =
      counts.size() == 1 ? counts[0] : n.op(kernels::concat_op(), {{"axis", int64_t{1}}}, counts);
  tf = cast(n, tf, DType::kFloat32);
  if (mode == "IDF") {
    tf = cast(n, n.op(kernels::gt_op(), {}, {tf, scalar_like(n, tf, 0)}), DType::kFloat32);
  }
  // [ngrams, outputs]: each n-gram's weight (1 for TF) at its output index.
  std::vector<float> place(size_t(ngrams * outputs), 0.0f);
  for (int64_t j = 0; j < ngrams; ++j) {
    place[size_t(j * outputs + indexes[size_t(j)])] =
        mode == "TF" || weights.empty() ? 1.0f : weights[size_t(j)];
  }
  OnnxValue y = n.op(kernels::matmul_op(), {},
                     {tf, n.constant(Tensor::from_vector<float>(place, Shape{ngrams, outputs}))});
  if (xs.rank() == 1) y = reshape(n, y, {outputs});
  n.set_output(0, y);
}

}  // namespace

void add_tfidf_converter(ConverterTable& table) {
  table.insert({"TfIdfVectorizer", convert_tfidf_vectorizer});
}

}  // namespace tandem::serialization::onnx_convert
