// Rows for scan.cc (cumsum, cumprod, cumprod_backward) and prod, whose
// gradient is built from cumprod; and their error messages. References sum
// and multiply along the axis by multi-index, in double.
#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

struct ScanCase {
  int axis;
  bool exclusive = false;
  bool reverse = false;
  Attrs attrs() const {
    return {{"axis", int64_t{axis}}, {"exclusive", exclusive}, {"reverse", reverse}};
  }
  // Whether position s of the axis counts toward position t's result.
  bool counts(int64_t s, int64_t t) const {
    if (exclusive && s == t) return false;
    return reverse ? s >= t : s <= t;
  }
};

// out[p] = fold of x over the positions of p's line that count toward p.
std::function<std::vector<Tensor>(const Inputs&)> scanned(ScanCase scan, bool product) {
  return [scan, product](const Inputs& in) {
    HostTensor x(in[0]);
    const int axis = scan.axis < 0 ? scan.axis + x.shape.rank() : scan.axis;
    return std::vector{build(x.shape, in[0].dtype(), [&](const Index& p) {
      double acc = product ? 1 : 0;
      Index q = p;
      for (q[axis] = 0; q[axis] < x.shape[axis]; ++q[axis]) {
        if (!scan.counts(q[axis], p[axis])) continue;
        acc = product ? acc * x.at(q) : acc + x.at(q);
      }
      return acc;
    })};
  };
}

// dx[p] = sum over the outputs q of p's line that p counts toward of
// g[q] * the product of the other factors of q: the gradient by its definition.
std::vector<Tensor> cumprod_backward_reference(const Inputs& in, ScanCase scan) {
  HostTensor x(in[0]), g(in[1]);
  const int axis = scan.axis;
  return {build(x.shape, in[0].dtype(), [&](const Index& p) {
    double dx = 0;
    Index q = p;
    for (q[axis] = 0; q[axis] < x.shape[axis]; ++q[axis]) {
      if (!scan.counts(p[axis], q[axis])) continue;
      double others = g.at(q);
      Index r = p;
      for (r[axis] = 0; r[axis] < x.shape[axis]; ++r[axis]) {
        if (r[axis] != p[axis] && scan.counts(r[axis], q[axis])) others *= x.at(r);
      }
      dx += others;
    }
    return dx;
  })};
}

OpTestCase scan_row(std::string op, std::string name, Tensor x, ScanCase scan, bool product) {
  return {.name = std::move(name),
          .op = std::move(op),
          .inputs = {x},
          .attrs = scan.attrs(),
          .reference = scanned(scan, product),
          .check_gradient = x.dtype() == DType::kFloat64};
}

// x with exact zeros, where a gradient by division would fail.
Tensor with_zeros() { return tensor_of({0.5, 0, 2, -1.5, 0, 3, 1.25, -0.75, 0, 2, 0, 0}, {3, 4}); }

// The product over `axes` (all when empty), keepdims or not.
std::function<std::vector<Tensor>(const Inputs&)> multiplied(std::vector<int> axes, bool keepdims) {
  return [axes, keepdims](const Inputs& in) {
    HostTensor x(in[0]);
    auto reduced = [&](int d) {
      return axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end();
    };
    Shape::Dims keep_dims;
    for (int d = 0; d < x.shape.rank(); ++d) keep_dims.push_back(reduced(d) ? 1 : x.shape[d]);
    Shape keep(keep_dims);
    std::vector<double> out(static_cast<size_t>(keep.numel()), 1.0);
    for_each_index(x.shape, [&](const Index& p) {
      int64_t flat = 0;
      for (int d = 0; d < x.shape.rank(); ++d) flat = flat * keep[d] + (reduced(d) ? 0 : p[d]);
      out[flat] *= x.at(p);
    });
    Shape::Dims dims;
    for (int d = 0; d < x.shape.rank(); ++d) {
      if (keepdims || !reduced(d)) dims.push_back(keep[d]);
    }
    return std::vector{result(out, Shape(dims), in[0].dtype())};
  };
}

TANDEM_OP_TEST_ROWS(scan) {
  std::vector<OpTestCase> rows;
  for (const char* op : {"cumsum", "cumprod"}) {
    const bool product = std::string(op) == "cumprod";
    rows.push_back(scan_row(op, "axis0", random_tensor({4, 3}, 1), {.axis = 0}, product));
    rows.push_back(scan_row(op, "last_axis", random_tensor({2, 3, 5}, 2), {.axis = -1}, product));
    rows.push_back(scan_row(op, "exclusive", random_tensor({2, 5, 3}, 3),
                            {.axis = 1, .exclusive = true}, product));
    rows.push_back(
        scan_row(op, "reverse", random_tensor({5, 2}, 4), {.axis = 0, .reverse = true}, product));
    rows.push_back(scan_row(op, "exclusive_reverse", random_tensor({3, 4}, 5),
                            {.axis = 1, .exclusive = true, .reverse = true}, product));
    rows.push_back(scan_row(op, "zeros", with_zeros(), {.axis = 1}, product));
    rows.push_back(scan_row(op, "zeros_exclusive_reverse", with_zeros(),
                            {.axis = 1, .exclusive = true, .reverse = true}, product));
    rows.push_back(scan_row(op, "empty_axis", random_tensor({2, 0}, 6), {.axis = 1}, product));
    rows.push_back(scan_row(op, "int64", tensor_of({3, -2, 5, 7, 1, -4}, {2, 3}, DType::kInt64),
                            {.axis = 1}, product));
    rows.push_back(scan_row(op, "float32", random_tensor({3, 6}, 7, -1, 1, DType::kFloat32),
                            {.axis = 1}, product));
  }
  for (ScanCase scan : {ScanCase{.axis = 1}, ScanCase{.axis = 1, .exclusive = true},
                        ScanCase{.axis = 0, .reverse = true},
                        ScanCase{.axis = 1, .exclusive = true, .reverse = true}}) {
    rows.push_back(
        {.name = "zeros" + std::string(scan.exclusive ? "_exclusive" : "") +
                 (scan.reverse ? "_reverse" : ""),
         .op = "cumprod_backward",
         .inputs = {with_zeros(), random_tensor({3, 4}, 8)},
         .attrs = scan.attrs(),
         .reference = [scan](const Inputs& in) { return cumprod_backward_reference(in, scan); },
         .check_gradient = false});
  }
  // prod: its gradient is the product of the others, which the zeros test.
  auto prod_row = [](std::string name, Tensor x, std::vector<int> axes, bool keepdims) {
    Attrs attrs{{"axes", std::vector<int64_t>(axes.begin(), axes.end())}, {"keepdims", keepdims}};
    return OpTestCase{.name = std::move(name),
                      .op = "prod",
                      .inputs = {x},
                      .attrs = attrs,
                      .reference = multiplied(axes, keepdims),
                      .check_gradient = x.dtype() == DType::kFloat64};
  };
  rows.push_back(prod_row("all", random_tensor({2, 3}, 9, 0.5, 1.5), {}, false));
  rows.push_back(prod_row("zeros_axis1", with_zeros(), {1}, false));
  rows.push_back(prod_row("zeros_axis0_keepdims", with_zeros(), {0}, true));
  rows.push_back(prod_row("inner_axes", random_tensor({2, 3, 2, 2}, 10), {1, 3}, false));
  rows.push_back(prod_row("one_zero", tensor_of({2, 0, 3, -1}, {4}), {}, false));
  rows.push_back(prod_row("empty", random_tensor({0, 3}, 11), {0}, false));
  rows.push_back(prod_row("int32", tensor_of({2, -3, 4, 5}, {2, 2}, DType::kInt32), {1}, false));
  return rows;
}

// Verifies that the scans check their axis and dtype at the call.
TEST(ScanOpsTest, CallErrors) {
  std::string what = error_of([] { call("cumsum", {random_tensor({}, 1)}); });
  EXPECT_THAT(what, HasSubstr("cumsum"));
  EXPECT_THAT(what, HasSubstr("cannot scan a scalar"));
  what = error_of([] { call("cumprod", {random_tensor({2, 3}, 1)}, {{"axis", int64_t{2}}}); });
  EXPECT_THAT(what, HasSubstr("axis 2"));
  what = error_of([] { call("cumsum", {tensor_of({1, 0}, {2}, DType::kBool)}); });
  EXPECT_THAT(what,
              HasSubstr("running sums and products of bool are not supported; cast to int64"));
}

}  // namespace
}  // namespace tandem::kernels::testing
