// Rows for matmul.cc (matmul, linear), its error messages, and a throughput
// figure for the float32 (oneDNN) path.

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

// NumPy's matmul, element by element: 1-D operands become a row (a) or a
// column (b), batch axes broadcast, the added axes are dropped at the end.
Tensor reference_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  std::vector<int64_t> da(a.shape().begin(), a.shape().end());
  std::vector<int64_t> db(b.shape().begin(), b.shape().end());
  std::vector<double> va = values_of(a), vb = values_of(b);
  const bool a_vec = da.size() == 1, b_vec = db.size() == 1;
  if (a_vec) da.insert(da.begin(), 1);
  if (b_vec) db.push_back(1);
  // Materialize the transposes of the last two axes.
  auto transpose = [](std::vector<int64_t>& dims, std::vector<double>& v) {
    int64_t r = dims[dims.size() - 2], c = dims.back(),
            mats = static_cast<int64_t>(v.size()) / std::max<int64_t>(r * c, 1);
    std::vector<double> t(v.size());
    for (int64_t m = 0; m < mats; ++m) {
      for (int64_t i = 0; i < r; ++i) {
        for (int64_t j = 0; j < c; ++j) t[m * r * c + j * r + i] = v[m * r * c + i * c + j];
      }
    }
    std::swap(dims[dims.size() - 2], dims.back());
    v = t;
  };
  if (ta && !a_vec) transpose(da, va);
  if (tb && !b_vec) transpose(db, vb);
  const int64_t m = da[da.size() - 2], k = da.back(), n = db.back();
  EXPECT_EQ(k, db[db.size() - 2]);
  std::vector<int64_t> ba(da.begin(), da.end() - 2), bb(db.begin(), db.end() - 2);
  size_t rank = std::max(ba.size(), bb.size());
  ba.insert(ba.begin(), rank - ba.size(), 1);
  bb.insert(bb.begin(), rank - bb.size(), 1);
  std::vector<int64_t> batch(rank);
  for (size_t i = 0; i < rank; ++i) batch[i] = std::max(ba[i], bb[i]);
  int64_t count = 1;
  for (int64_t d : batch) count *= d;
  std::vector<double> out(count * m * n, 0.0);
  for (int64_t e = 0; e < count; ++e) {
    // Batch index -> offsets of the (broadcast) operands.
    int64_t rest = e, ia = 0, ib = 0, sa = 1, sb = 1;
    for (int axis = static_cast<int>(rank) - 1; axis >= 0; --axis) {
      int64_t index = rest % batch[axis];
      rest /= batch[axis];
      ia += (ba[axis] == 1 ? 0 : index) * sa;
      ib += (bb[axis] == 1 ? 0 : index) * sb;
      sa *= ba[axis];
      sb *= bb[axis];
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += va[ia * m * k + i * k + p] * vb[ib * k * n + p * n + j];
        }
        out[(e * m + i) * n + j] = sum;
      }
    }
  }
  std::vector<int64_t> shape = batch;
  if (!a_vec) shape.push_back(m);
  if (!b_vec) shape.push_back(n);
  return result(out, Shape(absl::Span<const int64_t>(shape)), a.dtype());
}

OpTestCase matmul_row(std::string name, Shape a, Shape b, bool ta = false, bool tb = false) {
  return {.name = std::move(name),
          .op = "matmul",
          .inputs = {random_tensor(a, 1), random_tensor(b, 2)},
          .attrs = {{"transpose_a", ta}, {"transpose_b", tb}},
          .reference = [ta, tb](const Inputs& in) {
            return std::vector{reference_matmul(in[0], in[1], ta, tb)};
          }};
}

// x [..., in] W^T + b.
Tensor reference_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<double> vx = values_of(x), vw = values_of(w), vb = values_of(b);
  const int64_t out = w.shape()[0], in = w.shape()[1];
  const int64_t rows = in == 0 ? 0 : x.numel() / in;
  std::vector<double> y(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = vb[o];
      for (int64_t i = 0; i < in; ++i) sum += vx[r * in + i] * vw[o * in + i];
      y[r * out + o] = sum;
    }
  }
  std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
  shape.back() = out;
  return result(y, Shape(absl::Span<const int64_t>(shape)), x.dtype());
}

OpTestCase linear_row(std::string name, Shape x, int64_t out) {
  int64_t in = x.dim(-1);
  return {.name = std::move(name),
          .op = "linear",
          .inputs = {random_tensor(x, 3), random_tensor({out, in}, 4), random_tensor({out}, 5)},
          .attrs = {},
          .reference = [](const Inputs& in) {
            return std::vector{reference_linear(in[0], in[1], in[2])};
          }};
}

TANDEM_OP_TEST_ROWS(matmul) {
  std::vector<OpTestCase> rows;
  add_both(rows, matmul_row("2d", {3, 4}, {4, 5}));
  add_both(rows, matmul_row("batched", {2, 3, 4}, {2, 4, 2}));
  add_both(rows, matmul_row("batch_broadcast", {2, 1, 2, 3}, {3, 3, 2}));
  add_both(rows, matmul_row("matrix_times_batch", {2, 3}, {2, 3, 2}));
  add_both(rows, matmul_row("vector_matrix", {4}, {4, 3}));
  add_both(rows, matmul_row("matrix_vector", {3, 4}, {4}));
  add_both(rows, matmul_row("vector_vector", {5}, {5}));
  add_both(rows, matmul_row("vector_batch", {3}, {2, 3, 2}));
  add_both(rows, matmul_row("batch_vector", {2, 2, 3}, {3}));
  add_both(rows, matmul_row("transpose_a", {4, 3}, {4, 2}, true, false));
  add_both(rows, matmul_row("transpose_b", {3, 4}, {2, 4}, false, true));
  add_both(rows, matmul_row("transpose_both_batched", {2, 4, 3}, {1, 2, 4}, true, true));
  // Large enough for oneDNN: sgemm without batch axes (every transpose and
  // vector form), the matmul primitive with them. float32 accumulates over
  // 96 terms.
  auto add_large_f32 = [&](std::string name, Shape a, Shape b, bool ta, bool tb) {
    rows.push_back(matmul_row(std::move(name), a, b, ta, tb));
    rows.back().inputs = {random_tensor(a, 1, -1, 1, DType::kFloat32),
                          random_tensor(b, 2, -1, 1, DType::kFloat32)};
    rows.back().tolerance = 1e-4;
    rows.back().check_gradient = false;
  };
  add_large_f32("large_f32", {64, 96}, {96, 48}, false, false);
  add_large_f32("large_f32_transpose_a", {96, 64}, {96, 48}, true, false);
  add_large_f32("large_f32_transpose_b", {64, 96}, {48, 96}, false, true);
  add_large_f32("large_f32_transpose_both", {96, 64}, {48, 96}, true, true);
  add_large_f32("large_f32_matrix_vector", {64, 96}, {96}, false, false);
  add_large_f32("large_f32_vector_matrix", {96}, {96, 64}, false, false);
  add_large_f32("large_f32_batched", {2, 32, 96}, {2, 24, 96}, false, true);
  for (auto [name, a, b] : {std::tuple{"empty_rows", Shape{0, 3}, Shape{3, 2}},
                            std::tuple{"empty_inner", Shape{2, 0}, Shape{0, 3}}}) {
    add_both(rows, matmul_row(name, a, b));
    rows[rows.size() - 2].check_gradient = false;
  }

  add_both(rows, linear_row("2d", {3, 4}, 5));
  add_both(rows, linear_row("3d", {2, 2, 3}, 4));
  add_both(rows, linear_row("1d", {4}, 3));
  rows.push_back(linear_row("large_f32", {32, 128}, 64));
  for (Tensor& t : rows.back().inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
  rows.back().tolerance = 1e-4;
  rows.back().check_gradient = false;
  // A few rows: Note [Linear for a few rows] (a partial vector of inputs, and
  // outputs past the last block of four).
  add_both(rows, linear_row("few_rows", {3, 37}, 11));
  // Fused activations: float64 runs the plain loops, float32 oneDNN's post-op
  // (large) or the few-rows kernel followed by the activation's formula.
  for (const ActivationCase& a : fused_activations()) {
    add_both(rows, activated(linear_row("3d", {2, 2, 3}, 4), a));
    rows.push_back(activated(linear_row("large_f32", {32, 128}, 64), a));
    for (Tensor& t : rows.back().inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
    rows.back().tolerance = 1e-4;
    add_both(rows, activated(linear_row("few_rows", {2, 37}, 11), a));
  }
  return rows;
}

std::string matmul_error(Shape a, Shape b, Attrs attrs = {}) {
  try {
    call("matmul", {random_tensor(a, 1), random_tensor(b, 2)}, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Verifies the promise behind matmul's OpDef::one_core and OpDef::work: a
// call skips the all-cores lock exactly when it has at most 16^3
// multiply-adds, so matmul_kernel runs it in its plain loops (kSmallMatmul),
// never in oneDNN's OpenMP team, whichever operand is transposed or 1-D; and
// the work counted is its multiply-adds.
TEST(MatmulTest, OnlyTinyProductsSkipTheAllCoresLock) {
  const OpDef& matmul = Registry::global().get("matmul");
  int64_t single_threaded = 0;
  auto check = [&](const Shape& a, const Shape& b, const Shape& out, int64_t macs) {
    const Shape* inputs[] = {&a, &b};
    const Shape* outputs[] = {&out};
    const CallShapes shapes{inputs, outputs};
    ASSERT_EQ(matmul.work(shapes), macs)
        << a.to_string() << " @ " << b.to_string() << " -> " << out.to_string();
    const bool one_core = !uses_all_cores(matmul, shapes);
    ASSERT_EQ(one_core, macs <= 16 * 16 * 16)
        << a.to_string() << " @ " << b.to_string() << " -> " << out.to_string();
    single_threaded += one_core;
  };
  for (int64_t batch : {1, 2, 5}) {
    for (int64_t m = 1; m <= 24; ++m) {
      for (int64_t n = 1; n <= 24; ++n) {
        for (int64_t k = 1; k <= 24; ++k) {
          const int64_t macs = batch * m * n * k;
          for (bool transpose_a : {false, true}) {
            Shape a = transpose_a ? Shape{batch, k, m} : Shape{batch, m, k};
            check(a, Shape{batch, k, n}, Shape{batch, m, n}, macs);
            check(a, Shape{k, n}, Shape{batch, m, n}, macs);  // b broadcast.
            check(a, Shape{k}, Shape{batch, m}, batch * m * k);
          }
          check(Shape{k}, Shape{batch, k, n}, Shape{batch, n}, batch * n * k);
        }
      }
    }
  }
  EXPECT_GT(single_threaded, 0);
  check({64, 64}, {64, 64}, {64, 64}, 64 * 64 * 64);
}

// Verifies linear's OpDef::one_core: a few rows of a layer whose weights
// fit stay on one core (Note [Linear for a few rows]); a batch, or weights
// too big for one core to stream, use every core.
TEST(MatmulTest, LinearOfAFewRowsStaysOnOneCore) {
  const OpDef& linear = Registry::global().get("linear");
  auto all_cores = [&](Shape x, int64_t out) {
    Shape w{out, x.dim(-1)}, b{out};
    Shape::Dims y_dims(x.begin(), x.end());
    y_dims.back() = out;
    Shape y(y_dims);
    const Shape* inputs[] = {&x, &w, &b};
    const Shape* outputs[] = {&y};
    return uses_all_cores(linear, CallShapes{inputs, outputs});
  };
  EXPECT_FALSE(all_cores({1, 784}, 256));
  EXPECT_FALSE(all_cores({784}, 256));
  EXPECT_FALSE(all_cores({2, 2, 784}, 256));
  EXPECT_TRUE(all_cores({5, 784}, 256));
  EXPECT_TRUE(all_cores({64, 784}, 256));
  EXPECT_TRUE(all_cores({1, 8192}, 8192));
  EXPECT_FALSE(all_cores({1, 0}, 16));
}

// Verifies that an inner-dimension mismatch names both shapes and dimensions.
TEST(MatmulTest, InnerDimensionMismatchIsNamed) {
  EXPECT_THAT(matmul_error({2, 3}, {4, 5}),
              HasSubstr("matmul: shapes [2, 3] and [4, 5] cannot be multiplied: inner "
                        "dimensions 3 and 4 differ"));
  EXPECT_THAT(matmul_error({3}, {4}), HasSubstr("inner dimensions 3 and 4 differ"));
  EXPECT_THAT(matmul_error({3, 4}, {4, 3}, {{"transpose_b", true}}), HasSubstr("differ"));
}

// Verifies that batch axes that do not broadcast are an error naming them.
TEST(MatmulTest, BatchMismatchIsNamed) {
  EXPECT_THAT(matmul_error({2, 3, 4}, {3, 4, 5}),
              HasSubstr("shapes [2, 3, 4] and [3, 4, 5] cannot be multiplied: batch dimensions "
                        "2 and 3 do not broadcast"));
}

// Verifies that scalars, integer and mixed dtypes are rejected.
TEST(MatmulTest, BadOperandsAreRejected) {
  EXPECT_THAT(matmul_error({}, {3}), HasSubstr("at least one axis"));
  Tensor f32 = random_tensor({2, 2}, 1, -1, 1, DType::kFloat32);
  EXPECT_THROW(call("matmul", {f32, random_tensor({2, 2}, 2)}), Error);
  Tensor ints = tensor_of({1, 2, 3, 4}, {2, 2}, DType::kInt64);
  EXPECT_THROW(call("matmul", {ints, ints}), Error);
}

// Verifies that linear checks the feature count and the bias.
TEST(LinearTest, ShapeMismatchIsNamed) {
  auto error = [](Shape x, Shape w, Shape b) -> std::string {
    try {
      call("linear", {random_tensor(x, 1), random_tensor(w, 2), random_tensor(b, 3)});
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error({2, 3}, {4, 5}, {4}),
              HasSubstr("x of shape [2, 3] has 3 features but weight of shape [4, 5] expects 5"));
  EXPECT_THAT(error({2, 5}, {4, 5}, {3}), HasSubstr("bias must be [4]"));
  EXPECT_THAT(error({2, 5}, {5}, {5}), HasSubstr("weight must be [out_features, in_features]"));
}

// Verifies that a bad activation name is an error naming the op and the
// value, and that a fused linear refuses to be differentiated.
TEST(LinearTest, FusedActivationChecks) {
  Inputs in = {random_tensor({2, 3}, 1), random_tensor({4, 3}, 2), random_tensor({4}, 3)};
  EXPECT_THAT(error_of([&] {
                call("linear", in, {{"activation", std::string("swish")}});
              }),
              ::testing::AllOf(HasSubstr("linear"), HasSubstr("'swish'")));
  const OpDef& linear = Registry::global().get("linear");
  Attrs attrs = resolve_attrs(linear, {{"activation", std::string("relu")}});
  Inputs out = call("linear", in, attrs);
  Inputs grad = {out[0]};
  EXPECT_THAT(
      error_of([&] {
        linear.gradient({.inputs = in, .outputs = out, .grad_outputs = grad, .attrs = attrs});
      }),
      HasSubstr("fused activation is for inference graphs"));
}

}  // namespace
}  // namespace tandem::kernels::testing
