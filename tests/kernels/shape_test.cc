// Rows for shape.cc, and its error messages. References index plain host
// vectors with multi-indices, independently of the kernels' chunked copies.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

Shape with_dim(const Shape& shape, int axis, int64_t size) {
  Shape::Dims dims(shape.begin(), shape.end());
  dims[axis] = size;
  return Shape(dims);
}

// Same values, another shape (reshape, flatten).
std::function<Tensor(const Inputs&)> same_values(Shape shape) {
  return [shape](const Inputs& in) { return result(values_of(in[0]), shape, in[0].dtype()); };
}

std::function<Tensor(const Inputs&)> transposed(Ints perm) {
  return [perm](const Inputs& in) {
    HostTensor x(in[0]);
    Shape::Dims dims;
    for (int64_t p : perm) dims.push_back(x.shape[static_cast<int>(p)]);
    return build(Shape(dims), in[0].dtype(), [&](const Index& out) {
      Index from(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) from[perm[i]] = out[i];
      return x.at(from);
    });
  };
}

// Inputs joined along `axis`; `stack` first gives each a new axis of size 1.
std::vector<Tensor> joined(const Inputs& in, int axis, bool stack) {
  std::vector<HostTensor> hosts;
  for (const Tensor& t : in) hosts.emplace_back(t);
  auto dims_of = [&](const HostTensor& h) {
    Shape::Dims dims(h.shape.begin(), h.shape.end());
    if (stack) dims.insert(dims.begin() + axis, 1);
    return dims;
  };
  Shape::Dims dims = dims_of(hosts[0]);
  dims[axis] = 0;
  for (const HostTensor& h : hosts) dims[axis] += dims_of(h)[axis];
  return {build(Shape(dims), in[0].dtype(), [&](const Index& out) {
    int64_t row = out[axis];
    for (const HostTensor& h : hosts) {
      int64_t rows = dims_of(h)[axis];
      if (row < rows) {
        Index from = out;
        from[axis] = row;
        if (stack) from.erase(from.begin() + axis);
        return h.at(from);
      }
      row -= rows;
    }
    return 0.0;
  })};
}

// x[begin:end:step] along axis, bounds already resolved.
Tensor sliced(const Tensor& t, int axis, int64_t begin, int64_t count, int64_t step) {
  HostTensor x(t);
  return build(with_dim(x.shape, axis, count), t.dtype(), [&](const Index& out) {
    Index from = out;
    from[axis] = begin + out[axis] * step;
    return x.at(from);
  });
}

// The inverse: rows of `t` put at begin + j * step of zeros of length size.
Tensor unsliced(const Tensor& t, int axis, int64_t begin, int64_t size, int64_t step) {
  HostTensor g(t);
  return build(with_dim(g.shape, axis, size), t.dtype(), [&](const Index& out) {
    int64_t offset = out[axis] - begin;
    if (offset < 0 || offset % step != 0 || offset / step >= g.shape[axis]) return 0.0;
    Index from = out;
    from[axis] = offset / step;
    return g.at(from);
  });
}

// out[..., j..., ...] = x[..., indices[j...], ...] along axis.
Tensor taken(const Tensor& t, const Tensor& indices, int axis) {
  HostTensor x(t), idx(indices);
  Shape::Dims dims(x.shape.begin(), x.shape.begin() + axis);
  dims.insert(dims.end(), idx.shape.begin(), idx.shape.end());
  dims.insert(dims.end(), x.shape.begin() + axis + 1, x.shape.end());
  return build(Shape(dims), t.dtype(), [&](const Index& out) {
    Index where(out.begin() + axis, out.begin() + axis + idx.shape.rank());
    int64_t i = static_cast<int64_t>(idx.at(where));
    if (i < 0) i += x.shape[axis];
    Index from(out.begin(), out.begin() + axis);
    from.push_back(i);
    from.insert(from.end(), out.begin() + axis + idx.shape.rank(), out.end());
    return x.at(from);
  });
}

TANDEM_OP_TEST_ROWS(shape) {
  std::vector<OpTestCase> rows;
  Tensor x234 = random_tensor({2, 3, 4}, 1);
  Tensor ints = tensor_of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kInt32);

  // reshape and flatten.
  rows.push_back(row("reshape", "explicit", {x234}, {{"shape", Ints{6, 4}}}, same_values({6, 4})));
  rows.push_back(row("reshape", "inferred", {x234}, {{"shape", Ints{4, -1}}}, same_values({4, 6})));
  rows.push_back(row("reshape", "to_scalar", {random_tensor({1, 1}, 2)}, {{"shape", Ints{}}},
                     same_values({})));
  rows.push_back(row("reshape", "int32", {ints}, {{"shape", Ints{3, 2}}}, same_values({3, 2})));
  rows.push_back(row("reshape", "empty", {random_tensor({0, 3}, 3)}, {{"shape", Ints{3, 0, 2}}},
                     same_values({3, 0, 2})));
  rows.push_back(row("flatten", "default", {x234}, {}, same_values({2, 12})));
  rows.push_back(row("flatten", "all", {x234}, {{"start_axis", int64_t{0}}}, same_values({24})));
  rows.push_back(row("flatten", "middle", {random_tensor({2, 3, 4, 5}, 4)},
                     {{"start_axis", int64_t{1}}, {"end_axis", int64_t{-2}}},
                     same_values({2, 12, 5})));
  rows.push_back(row("flatten", "scalar", {random_tensor({}, 5)}, {}, same_values({1})));

  // transpose.
  rows.push_back(row("transpose", "reverse_default", {x234}, {}, transposed({2, 1, 0})));
  rows.push_back(
      row("transpose", "perm", {x234}, {{"perm", Ints{1, 2, 0}}}, transposed({1, 2, 0})));
  rows.push_back(row("transpose", "negative_axes", {x234}, {{"perm", Ints{0, -1, -2}}},
                     transposed({0, 2, 1})));
  rows.push_back(row("transpose", "int32_matrix", {ints}, {}, transposed({1, 0})));
  rows.push_back(row("transpose", "large", {random_tensor({4, 5, 6}, 6)}, {{"perm", Ints{2, 0, 1}}},
                     transposed({2, 0, 1})));

  // concat and stack.
  auto join = [](int axis, bool stack) {
    return [axis, stack](const Inputs& in) { return joined(in, axis, stack)[0]; };
  };
  rows.push_back(row("concat", "axis0", {random_tensor({2, 3}, 7), random_tensor({1, 3}, 8)}, {},
                     join(0, false)));
  rows.push_back(
      row("concat", "axis1_three",
          {random_tensor({2, 1}, 9), random_tensor({2, 3}, 10), random_tensor({2, 2}, 11)},
          {{"axis", int64_t{1}}}, join(1, false)));
  rows.push_back(row("concat", "negative_axis_with_empty",
                     {random_tensor({2, 0, 2}, 12), random_tensor({2, 0, 3}, 13)},
                     {{"axis", int64_t{-1}}}, join(2, false)));
  rows.push_back(row("concat", "middle_axis",
                     {random_tensor({2, 2, 3}, 14), random_tensor({2, 1, 3}, 15)},
                     {{"axis", int64_t{1}}}, join(1, false)));
  rows.push_back(row("concat", "int32", {ints, ints}, {{"axis", int64_t{1}}}, join(1, false)));
  rows.push_back(row("stack", "axis0", {random_tensor({2, 3}, 16), random_tensor({2, 3}, 17)}, {},
                     join(0, true)));
  rows.push_back(
      row("stack", "last_axis",
          {random_tensor({2, 3}, 18), random_tensor({2, 3}, 19), random_tensor({2, 3}, 20)},
          {{"axis", int64_t{-1}}}, join(2, true)));
  rows.push_back(
      row("stack", "scalars", {random_tensor({}, 21), random_tensor({}, 22)}, {}, join(0, true)));
  rows.push_back(row("stack", "int32_middle", {ints, ints}, {{"axis", int64_t{1}}}, join(1, true)));

  // split: every piece, as a reference with several outputs.
  auto split_row = [](std::string name, Tensor x, int axis, Ints sizes) {
    bool gradient = x.dtype() == DType::kFloat64;
    return OpTestCase{.name = std::move(name),
                      .op = "split",
                      .inputs = {std::move(x)},
                      .attrs = {{"axis", int64_t{axis}}, {"sizes", sizes}},
                      .reference =
                          [axis, sizes](const Inputs& in) {
                            std::vector<Tensor> pieces;
                            int64_t begin = 0;
                            for (int64_t size : sizes) {
                              pieces.push_back(sliced(in[0], axis, begin, size, 1));
                              begin += size;
                            }
                            return pieces;
                          },
                      .check_gradient = gradient};
  };
  rows.push_back(split_row("axis0", random_tensor({5, 2}, 23), 0, {2, 3}));
  rows.push_back(split_row("axis1_with_empty", random_tensor({2, 6, 2}, 24), 1, {1, 0, 4, 1}));
  rows.push_back(split_row("single", random_tensor({3}, 25), 0, {3}));
  rows.push_back(split_row("int32", ints, 1, {1, 2}));

  // slice, with Python's bounds.
  auto slice_of = [](int axis, int64_t begin, int64_t count, int64_t step) {
    return [=](const Inputs& in) { return sliced(in[0], axis, begin, count, step); };
  };
  Tensor x75 = random_tensor({7, 5}, 26);
  rows.push_back(row("slice", "rows", {x75}, {{"begin", int64_t{1}}, {"end", int64_t{4}}},
                     slice_of(0, 1, 3, 1)));
  rows.push_back(row("slice", "step", {x75},
                     {{"axis", int64_t{1}}, {"begin", int64_t{0}}, {"step", int64_t{2}}},
                     slice_of(1, 0, 3, 2)));
  rows.push_back(row("slice", "negative_bounds", {x75},
                     {{"begin", int64_t{-5}}, {"end", int64_t{-1}}, {"step", int64_t{3}}},
                     slice_of(0, 2, 2, 3)));
  rows.push_back(row("slice", "clamped", {x75}, {{"begin", int64_t{-100}}, {"end", int64_t{100}}},
                     slice_of(0, 0, 7, 1)));
  rows.push_back(row("slice", "empty", {x75}, {{"begin", int64_t{4}}, {"end", int64_t{2}}},
                     slice_of(0, 4, 0, 1)));
  rows.push_back(row("slice", "int32", {ints}, {{"axis", int64_t{-1}}, {"begin", int64_t{1}}},
                     slice_of(1, 1, 2, 1)));
  rows.push_back(
      row("slice_backward", "step", {random_tensor({2, 3}, 27)},
          {{"axis", int64_t{1}}, {"begin", int64_t{1}}, {"step", int64_t{3}}, {"size", int64_t{8}}},
          [](const Inputs& in) { return unsliced(in[0], 1, 1, 8, 3); }));
  rows.push_back(row(
      "slice_backward", "negative_begin", {random_tensor({2, 2}, 28)},
      {{"begin", int64_t{-4}}, {"end", int64_t{-1}}, {"step", int64_t{2}}, {"size", int64_t{5}}},
      [](const Inputs& in) { return unsliced(in[0], 0, 1, 5, 2); }));

  // take and index_add (indices repeat and go negative).
  Tensor indices = tensor_of({2, 0, -1, 2}, {2, 2}, DType::kInt64);
  rows.push_back(row("take", "axis0", {random_tensor({3, 4}, 29), indices}, {},
                     [](const Inputs& in) { return taken(in[0], in[1], 0); }));
  rows.push_back(row("take", "axis1", {random_tensor({2, 5, 3}, 30), indices},
                     {{"axis", int64_t{1}}},
                     [](const Inputs& in) { return taken(in[0], in[1], 1); }));
  rows.push_back(
      row("take", "scalar_index", {random_tensor({3, 4}, 31), tensor_of({-2}, {}, DType::kInt64)},
          {{"axis", int64_t{-1}}}, [](const Inputs& in) { return taken(in[0], in[1], 1); }));
  rows.push_back(row("take", "int32_values", {ints, tensor_of({1, 1, 0}, {3}, DType::kInt64)}, {},
                     [](const Inputs& in) { return taken(in[0], in[1], 0); }));
  // embedding: take along axis 0 with indices in [0, rows) only.
  rows.push_back(row("embedding", "lookup",
                     {random_tensor({5, 3}, 41), tensor_of({4, 0, 2, 4}, {2, 2}, DType::kInt64)},
                     {}, [](const Inputs& in) { return taken(in[0], in[1], 0); }));
  rows.push_back(row("embedding", "scalar_index",
                     {random_tensor({4, 2, 2}, 42), tensor_of({3}, {}, DType::kInt64)}, {},
                     [](const Inputs& in) { return taken(in[0], in[1], 0); }));
  rows.push_back(row("embedding", "no_indices",
                     {random_tensor({3, 2}, 43), tensor_of({}, {0}, DType::kInt64)}, {},
                     [](const Inputs& in) { return taken(in[0], in[1], 0); }));
  auto index_added = [](int axis) {
    return [axis](const Inputs& in) {
      HostTensor x(in[0]), idx(in[1]), src(in[2]);
      std::vector<double> out = x.values;
      // Each element of src adds to the element of x its index names.
      for_each_index(src.shape, [&](const Index& at) {
        Index where(at.begin() + axis, at.begin() + axis + idx.shape.rank());
        int64_t i = static_cast<int64_t>(idx.at(where));
        if (i < 0) i += x.shape[axis];
        Index to(at.begin(), at.begin() + axis);
        to.push_back(i);
        to.insert(to.end(), at.begin() + axis + idx.shape.rank(), at.end());
        int64_t flat = 0;
        for (int d = 0; d < x.shape.rank(); ++d) flat = flat * x.shape[d] + to[d];
        out[flat] += src.at(at);
      });
      return result(out, x.shape, in[0].dtype());
    };
  };
  rows.push_back(row("index_add", "axis0",
                     {random_tensor({3, 4}, 32), indices, random_tensor({2, 2, 4}, 33)}, {},
                     index_added(0)));
  rows.push_back(row("index_add", "axis1",
                     {random_tensor({2, 5, 3}, 34), tensor_of({4, -5, 4}, {3}, DType::kInt64),
                      random_tensor({2, 3, 3}, 35)},
                     {{"axis", int64_t{1}}}, index_added(1)));
  rows.push_back(row("index_add", "int32",
                     {ints, tensor_of({1, 1}, {2}, DType::kInt64),
                      tensor_of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kInt32)},
                     {}, index_added(0)));

  // pad.
  auto padded = [](Ints pads, double value) {
    return [pads, value](const Inputs& in) {
      HostTensor x(in[0]);
      Shape::Dims dims(x.shape.begin(), x.shape.end());
      for (int i = 0; i < x.shape.rank(); ++i) dims[i] += pads[2 * i] + pads[2 * i + 1];
      return build(Shape(dims), in[0].dtype(), [&](const Index& out) {
        Index from(out.size());
        for (size_t i = 0; i < out.size(); ++i) {
          from[i] = out[i] - pads[2 * i];
          if (from[i] < 0 || from[i] >= x.shape[static_cast<int>(i)]) return value;
        }
        return x.at(from);
      });
    };
  };
  rows.push_back(row("pad", "both_axes", {random_tensor({2, 3}, 36)}, {{"pads", Ints{1, 0, 2, 1}}},
                     padded({1, 0, 2, 1}, 0)));
  rows.push_back(row("pad", "value_3d", {random_tensor({2, 2, 2}, 37)},
                     {{"pads", Ints{0, 1, 1, 1, 0, 2}}, {"value", -1.5}},
                     padded({0, 1, 1, 1, 0, 2}, -1.5)));
  rows.push_back(
      row("pad", "none", {random_tensor({3}, 38)}, {{"pads", Ints{0, 0}}}, padded({0, 0}, 0)));
  rows.push_back(row("pad", "scalar", {random_tensor({}, 39)}, {{"pads", Ints{}}}, padded({}, 0)));
  rows.push_back(row("pad", "empty_input", {random_tensor({0, 2}, 40)},
                     {{"pads", Ints{1, 1, 0, 0}}, {"value", 7.0}}, padded({1, 1, 0, 0}, 7)));
  rows.push_back(row("pad", "int32", {ints}, {{"pads", Ints{0, 1, 1, 0}}, {"value", 9.0}},
                     padded({0, 1, 1, 0}, 9)));
  // Pads wider than the input, on every side of a 4-D tensor: the gradient
  // slices each axis back.
  rows.push_back(row("pad", "wide_4d", {random_tensor({1, 2, 1, 2}, 44)},
                     {{"pads", Ints{2, 0, 0, 3, 4, 1, 1, 5}}, {"value", 0.5}},
                     padded({2, 0, 0, 3, 4, 1, 1, 5}, 0.5)));
  rows.push_back(row("pad", "one_side", {random_tensor({3, 2}, 45)}, {{"pads", Ints{0, 4, 0, 0}}},
                     padded({0, 4, 0, 0}, 0)));

  // expand.
  auto expanded = [](Shape shape) {
    return [shape](const Inputs& in) {
      HostTensor x(in[0]);
      int extra = shape.rank() - x.shape.rank();
      return build(shape, in[0].dtype(), [&](const Index& out) {
        Index from(x.shape.rank());
        for (int i = 0; i < x.shape.rank(); ++i) from[i] = x.shape[i] == 1 ? 0 : out[i + extra];
        return x.at(from);
      });
    };
  };
  rows.push_back(row("expand", "new_leading_axes", {random_tensor({3}, 41)},
                     {{"shape", Ints{2, 4, 3}}}, expanded({2, 4, 3})));
  rows.push_back(row("expand", "stretch_ones", {random_tensor({2, 1, 3}, 42)},
                     {{"shape", Ints{-1, 4, 3}}}, expanded({2, 4, 3})));
  rows.push_back(
      row("expand", "scalar", {random_tensor({}, 43)}, {{"shape", Ints{2, 2}}}, expanded({2, 2})));
  rows.push_back(row("expand", "identity", {random_tensor({2, 3}, 44)}, {{"shape", Ints{2, 3}}},
                     expanded({2, 3})));
  rows.push_back(row("expand", "int32", {tensor_of({1, 2}, {2, 1}, DType::kInt32)},
                     {{"shape", Ints{2, 3}}}, expanded({2, 3})));
  return rows;
}

// Verifies that reshape names both shapes and element counts, and refuses
// two -1 dimensions.
TEST(ShapeOpsTest, ReshapeErrors) {
  Tensor x = random_tensor({2, 3}, 1);
  std::string what = error_of([&] { call("reshape", {x}, {{"shape", Ints{4}}}); });
  EXPECT_THAT(what, HasSubstr("reshape"));
  EXPECT_THAT(what, HasSubstr("cannot reshape [2, 3] (6 elements) to [4] (4 elements)"));
  what = error_of([&] { call("reshape", {x}, {{"shape", Ints{-1, -1}}}); });
  EXPECT_THAT(what, HasSubstr("only one dimension may be -1"));
  what = error_of([&] { call("reshape", {x}, {{"shape", Ints{4, -1}}}); });
  EXPECT_THAT(what, HasSubstr("6 is not a multiple of 4"));
  what = error_of([&] { call("reshape", {x}); });
  EXPECT_THAT(what, HasSubstr("missing required attribute 'shape'"));
}

// Verifies that flatten and transpose check their axes.
TEST(ShapeOpsTest, AxisErrors) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  std::string what = error_of([&] {
    call("flatten", {x}, {{"start_axis", int64_t{2}}, {"end_axis", int64_t{1}}});
  });
  EXPECT_THAT(what, HasSubstr("flatten"));
  EXPECT_THAT(what, HasSubstr("start_axis 2 comes after end_axis 1"));
  what = error_of([&] { call("transpose", {x}, {{"perm", Ints{0, 1, 1}}}); });
  EXPECT_THAT(what, HasSubstr("transpose"));
  EXPECT_THAT(what, HasSubstr("not a permutation: axis 1 appears twice"));
  what = error_of([&] { call("transpose", {x}, {{"perm", Ints{1, 0}}}); });
  EXPECT_THAT(what, HasSubstr("has 2 entries but the input [2, 3, 4] has rank 3"));
  what = error_of([&] { call("transpose", {x}, {{"perm", Ints{0, 1, 3}}}); });
  EXPECT_THAT(what, HasSubstr("axis 3 is out of range for shape [2, 3, 4]"));
}

// Verifies that concat, stack and split name the mismatched shapes and sizes.
TEST(ShapeOpsTest, JoinAndSplitErrors) {
  Tensor a = random_tensor({2, 3}, 1), b = random_tensor({2, 4}, 2);
  std::string what = error_of([&] { call("concat", {a, b}); });
  EXPECT_THAT(what, HasSubstr("concat"));
  EXPECT_THAT(what, HasSubstr("input 1 has shape [2, 4] but input 0 has shape [2, 3]"));
  EXPECT_THAT(what, HasSubstr("differ at axis 1 (4 vs 3)"));
  what = error_of([&] { call("concat", {a, tensor_of({1, 2, 3}, {1, 3}, DType::kFloat32)}); });
  EXPECT_THAT(what, HasSubstr("input 1 is float32 but input 0 is float64"));
  what = error_of([&] { call("stack", {a, b}, {{"axis", int64_t{3}}}); });
  EXPECT_THAT(what, HasSubstr("axis 3 is out of range"));
  what = error_of([&] { call("stack", {a, b}); });
  EXPECT_THAT(what, HasSubstr("stack"));
  EXPECT_THAT(what, HasSubstr("[2, 4]"));
  what = error_of([&] { call("split", {a}, {{"axis", int64_t{1}}, {"sizes", Ints{1, 1}}}); });
  EXPECT_THAT(what, HasSubstr("split"));
  EXPECT_THAT(what, HasSubstr("add up to 2 but axis 1 of shape [2, 3] has size 3"));
  what = error_of([&] { call("split", {a}, {{"sizes", Ints{1, -1}}}); });
  EXPECT_THAT(what, HasSubstr("negative entry -1"));
}

// Verifies that slice refuses a non-positive step and scalars.
TEST(ShapeOpsTest, SliceErrors) {
  std::string what = error_of([] {
    call("slice", {random_tensor({4}, 1)}, {{"step", int64_t{0}}});
  });
  EXPECT_THAT(what, HasSubstr("slice"));
  EXPECT_THAT(what, HasSubstr("step must be positive, got 0"));
  what = error_of([] { call("slice", {random_tensor({}, 1)}); });
  EXPECT_THAT(what, HasSubstr("rank 0"));
}

// Verifies that take checks the index dtype at the call, and an index out of
// range when its values are read, naming the index and the bound.
TEST(ShapeOpsTest, TakeErrors) {
  Tensor x = random_tensor({3, 2}, 1);
  std::string what = error_of([&] { call("take", {x, tensor_of({0}, {1}, DType::kInt32)}); });
  EXPECT_THAT(what, HasSubstr("take"));
  EXPECT_THAT(what, HasSubstr("indices must be int64, got int32"));
  // The threaded engine throws at the read, the naive one at the call.
  what = error_of([&] { values_of(call("take", {x, tensor_of({1, 3}, {2}, DType::kInt64)})[0]); });
  EXPECT_THAT(what, HasSubstr("take"));
  EXPECT_THAT(what, HasSubstr("index 3 is out of range for an axis of size 3 (axis 0 of shape "
                              "[3, 2]; valid: -3 to 2)"));
  what = error_of([&] { values_of(call("take", {x, tensor_of({-4}, {1}, DType::kInt64)})[0]); });
  EXPECT_THAT(what, HasSubstr("index -4"));
  what = error_of([&] {
    call("index_add", {x, tensor_of({0}, {1}, DType::kInt64), random_tensor({2, 2}, 2)});
  });
  EXPECT_THAT(what, HasSubstr("index_add"));
  EXPECT_THAT(what, HasSubstr("src has shape [2, 2]"));
  EXPECT_THAT(what, HasSubstr("needs [1, 2]"));
}

// Verifies that pad and expand check their shapes.
TEST(ShapeOpsTest, PadAndExpandErrors) {
  Tensor x = random_tensor({2, 3}, 1);
  std::string what = error_of([&] { call("pad", {x}, {{"pads", Ints{1, 1}}}); });
  EXPECT_THAT(what, HasSubstr("pad"));
  EXPECT_THAT(what, HasSubstr("has 2 entries; a tensor of shape [2, 3] needs 4"));
  what = error_of([&] { call("pad", {x}, {{"pads", Ints{0, 0, -1, 0}}}); });
  EXPECT_THAT(what, HasSubstr("negative entry at axis 1"));
  what = error_of([] {
    call("pad", {tensor_of({1}, {1}, DType::kInt32)}, {{"pads", Ints{1, 1}}, {"value", 0.5}});
  });
  EXPECT_THAT(what, HasSubstr("value 0.5 is not a value of int32"));
  what = error_of([&] { call("expand", {x}, {{"shape", Ints{4, 3}}}); });
  EXPECT_THAT(what, HasSubstr("expand"));
  EXPECT_THAT(
      what, HasSubstr("cannot expand [2, 3] to [4, 3]: dimension 2 at axis 0 is neither 1 nor 4"));
  what = error_of([&] { call("expand", {x}, {{"shape", Ints{3}}}); });
  EXPECT_THAT(what, HasSubstr("fewer dimensions"));
}

// Verifies that pads whose sum overflows int64 are an error at the call
// (2 + INT64_MAX + INT64_MAX wrapped to 0, and the kernel wrote past its
// output), and that pad's gradient, which slices the padding off, gives the
// input's shape for the largest pads that fit.
TEST(ShapeOpsTest, PadSizesAreChecked) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor x = random_tensor({2, 3}, 1);
  std::string what = error_of([&] { call("pad", {x}, {{"pads", Ints{kMax, kMax, 0, 0}}}); });
  EXPECT_THAT(what, HasSubstr("pad: axis 0 of [2, 3] padded by pads[0] overflows int64 (2 + "
                              "9223372036854775807)"));
  what = error_of([&] { call("pad", {x}, {{"pads", Ints{0, 0, 1, kMax}}}); });
  EXPECT_THAT(what, HasSubstr("pad: axis 1 of [2, 3] padded by pads[2] and pads[3] overflows "
                              "int64 (4 + 9223372036854775807)"));
  Tensor empty = random_tensor({0, 3}, 2);
  const Ints widest{0, 0, kMax - 4, 1};
  Tensor padded = call1("pad", {empty}, {{"pads", widest}});
  EXPECT_EQ(padded.shape(), (Shape{0, kMax}));
  const OpDef& pad = Registry::global().get("pad");
  Attrs attrs = resolve_attrs(pad, {{"pads", widest}});
  std::vector<Tensor> grads = pad.gradient({{empty}, {padded}, {padded}, attrs});
  EXPECT_EQ(grads[0].shape(), empty.shape());
}

// Verifies that embedding refuses every index outside [0, rows), -1 too
// (take counts it from the end; a lookup table has no end), naming the op,
// the index and the table's shape.
TEST(ShapeOpsTest, EmbeddingIndicesAreBoundsChecked) {
  Tensor weight = random_tensor({3, 2}, 1);
  for (double bad : {-1.0, 3.0, -4.0, 1e18}) {
    SCOPED_TRACE(bad);
    std::string what = error_of([&] {
      values_of(call1("embedding", {weight, tensor_of({0, bad}, {2}, DType::kInt64)}));
    });
    EXPECT_THAT(what, HasSubstr("embedding: index "));
    EXPECT_THAT(what, HasSubstr(str_cat(static_cast<int64_t>(bad))));
    EXPECT_THAT(
        what,
        HasSubstr("out of range for an axis of size 3 (axis 0 of shape [3, 2]; valid: 0 to 2)"));
  }
  EXPECT_THAT(error_of([&] {
                call1("embedding", {weight, tensor_of({0}, {1}, DType::kInt32)});
              }),
              HasSubstr("indices must be int64, got int32"));
  EXPECT_THAT(error_of([&] {
                call1("embedding", {random_tensor({}, 1), tensor_of({0}, {1}, DType::kInt64)});
              }),
              HasSubstr("cannot index a scalar"));
}

// Verifies that split's gradient fills outputs without a gradient with zeros.
TEST(ShapeOpsTest, SplitGradientZerosForMissingOutputs) {
  const OpDef& split = Registry::global().get("split");
  Tensor x = random_tensor({5}, 1);
  Attrs attrs{{"axis", int64_t{0}}, {"sizes", Ints{2, 3}}};
  std::vector<Tensor> outputs = call("split", {x}, attrs);
  Tensor g = tensor_of({7, 8, 9}, {3});
  std::vector<Tensor> grads =
      split.gradient({{x}, outputs, {Tensor(), g}, resolve_attrs(split, attrs)});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(values_of(grads[0]), (std::vector<double>{0, 0, 7, 8, 9}));
}

}  // namespace
}  // namespace tandem::kernels::testing
