// Rows for indexing.cc (gather, scatter, scatter_add, gather_nd,
// scatter_nd_add, one_hot), and its error messages. References walk every
// multi-index of the host values, independently of the kernels' offsets.
#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

int64_t resolved(double index, int64_t size) {
  auto i = static_cast<int64_t>(index);
  return i < 0 ? i + size : i;
}

Tensor indices_of(std::vector<double> values, Shape shape) {
  return tensor_of(std::move(values), std::move(shape), DType::kInt64);
}

// The position of x that element `p` of the indices addresses along `axis`.
Index addressed(const Index& p, const HostTensor& idx, const Shape& x, int axis) {
  Index at = p;
  at[axis] = resolved(idx.at(p), x[axis]);
  return at;
}

// x[p with p[axis] = indices[p]], shaped like the indices.
std::function<Tensor(const Inputs&)> gathered(int axis) {
  return [axis](const Inputs& in) {
    HostTensor x(in[0]), idx(in[1]);
    return build(idx.shape, in[0].dtype(),
                 [&](const Index& p) { return x.at(addressed(p, idx, x.shape, axis)); });
  };
}

// x with src[p] written at (add = false) or added to (add = true) what
// gather reads for p, in the order of the indices.
std::function<Tensor(const Inputs&)> scattered(int axis, bool add) {
  return [axis, add](const Inputs& in) {
    HostTensor x(in[0]), idx(in[1]), src(in[2]);
    std::vector<double> out = x.values;
    for_each_index(idx.shape, [&](const Index& p) {
      Index at = addressed(p, idx, x.shape, axis);
      int64_t flat = 0;
      for (int d = 0; d < x.shape.rank(); ++d) flat = flat * x.shape[d] + at[d];
      out[flat] = (add ? out[flat] : 0.0) + src.at(p);
    });
    return result(out, x.shape, in[0].dtype());
  };
}

// The position of data that element `slice_at` of the slice selected by
// index tuple `row` (a multi-index of indices without its last axis) is.
Index tuple_position(const Index& row, const Index& slice_at, const HostTensor& idx,
                     const Shape& data, int batch_dims) {
  Index at(row.begin(), row.begin() + batch_dims);
  const int64_t k = idx.shape[idx.shape.rank() - 1];
  for (int64_t j = 0; j < k; ++j) {
    Index entry = row;
    entry.push_back(j);
    at.push_back(resolved(idx.at(entry), data[static_cast<int>(at.size())]));
  }
  at.insert(at.end(), slice_at.begin(), slice_at.end());
  return at;
}

std::function<Tensor(const Inputs&)> gathered_nd(int batch_dims) {
  return [batch_dims](const Inputs& in) {
    HostTensor data(in[0]), idx(in[1]);
    const int row_rank = idx.shape.rank() - 1;
    Shape::Dims dims(idx.shape.begin(), idx.shape.end() - 1);
    const int64_t k = idx.shape[row_rank];
    dims.insert(dims.end(), data.shape.begin() + batch_dims + k, data.shape.end());
    return build(Shape(dims), in[0].dtype(), [&](const Index& o) {
      Index row(o.begin(), o.begin() + row_rank), slice_at(o.begin() + row_rank, o.end());
      return data.at(tuple_position(row, slice_at, idx, data.shape, batch_dims));
    });
  };
}

std::function<Tensor(const Inputs&)> scattered_nd(int batch_dims) {
  return [batch_dims](const Inputs& in) {
    HostTensor data(in[0]), idx(in[1]), updates(in[2]);
    std::vector<double> out = data.values;
    const int row_rank = idx.shape.rank() - 1;
    for_each_index(updates.shape, [&](const Index& u) {
      Index row(u.begin(), u.begin() + row_rank), slice_at(u.begin() + row_rank, u.end());
      Index at = tuple_position(row, slice_at, idx, data.shape, batch_dims);
      int64_t flat = 0;
      for (int d = 0; d < data.shape.rank(); ++d) flat = flat * data.shape[d] + at[d];
      out[flat] += updates.at(u);
    });
    return result(out, data.shape, in[0].dtype());
  };
}

TANDEM_OP_TEST_ROWS(indexing) {
  std::vector<OpTestCase> rows;
  Attrs axis0{{"axis", int64_t{0}}}, axis1{{"axis", int64_t{1}}}, last{{"axis", int64_t{-1}}};
  // gather: indices repeat, go negative, are shorter than x off the axis and
  // longer on it.
  rows.push_back(row("gather", "axis0",
                     {random_tensor({3, 4}, 1), indices_of({2, 0, -1, 1, 0, 0, 2, -3}, {2, 4})},
                     axis0, gathered(0)));
  rows.push_back(row("gather", "axis1_longer",
                     {random_tensor({2, 3, 2}, 2),
                      indices_of({0, 2, 1, -1, 0, 0, 2, 1, 1, 1, -2, 0, 2, 2, 0, 1}, {2, 4, 2})},
                     axis1, gathered(1)));
  rows.push_back(row("gather", "last_axis_shorter",
                     {random_tensor({3, 5}, 3), indices_of({4, 0, 3, 3}, {2, 2})}, last,
                     gathered(1)));
  rows.push_back(
      row("gather", "int32_values",
          {tensor_of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kInt32), indices_of({2, 1, 0, 0}, {2, 2})},
          axis1, gathered(1)));
  rows.push_back(row("gather", "no_indices", {random_tensor({2, 3}, 4), indices_of({}, {2, 0})},
                     axis1, gathered(1)));
  // scatter: distinct positions (a repeated one has no gradient for the
  // overwritten value); scatter_add: repeats accumulate.
  rows.push_back(row("scatter", "axis0",
                     {random_tensor({3, 4}, 5), indices_of({2, 0, -1, 1, 0, 1, 0, 2}, {2, 4}),
                      random_tensor({2, 4}, 6)},
                     axis0, scattered(0, false)));
  rows.push_back(
      row("scatter", "last_axis",
          {random_tensor({2, 5}, 7), indices_of({4, 0, -4, 2}, {2, 2}), random_tensor({2, 2}, 8)},
          last, scattered(1, false)));
  rows.push_back(row("scatter", "uint8",
                     {tensor_of({1, 2, 3, 4}, {4}, DType::kUInt8), indices_of({3, 0}, {2}),
                      tensor_of({9, 7}, {2}, DType::kUInt8)},
                     axis0, scattered(0, false)));
  rows.push_back(row("scatter_add", "repeats",
                     {random_tensor({3, 4}, 9), indices_of({2, 0, -1, 1, 2, 0, 2, 1}, {2, 4}),
                      random_tensor({2, 4}, 10)},
                     axis0, scattered(0, true)));
  rows.push_back(row("scatter_add", "axis1_longer",
                     {random_tensor({2, 3}, 11), indices_of({0, 0, 2, 1, 1, 1, -1, 0}, {2, 4}),
                      random_tensor({2, 4}, 12)},
                     axis1, scattered(1, true)));
  rows.push_back(row("scatter_add", "int64",
                     {tensor_of({1, 2, 3}, {3}, DType::kInt64), indices_of({0, 0, 2}, {3}),
                      tensor_of({10, 20, 30}, {3}, DType::kInt64)},
                     axis0, scattered(0, true)));
  // gather_nd and scatter_nd_add: whole-element and slice tuples, batches.
  Attrs batch1{{"batch_dims", int64_t{1}}};
  rows.push_back(row("gather_nd", "elements",
                     {random_tensor({3, 4}, 13), indices_of({2, 3, 0, -1, -3, 1}, {3, 2})}, {},
                     gathered_nd(0)));
  rows.push_back(row("gather_nd", "slices",
                     {random_tensor({3, 2, 2}, 14), indices_of({2, 0, -1, 1}, {2, 2, 1})}, {},
                     gathered_nd(0)));
  rows.push_back(
      row("gather_nd", "batch",
          {random_tensor({2, 3, 4}, 15), indices_of({2, 1, 0, 0, 1, 3, -1, -1}, {2, 2, 2})}, batch1,
          gathered_nd(1)));
  rows.push_back(row(
      "scatter_nd_add", "repeats",
      {random_tensor({3, 4}, 16), indices_of({2, 3, 0, -1, 2, 3}, {3, 2}), random_tensor({3}, 17)},
      {}, scattered_nd(0)));
  rows.push_back(row("scatter_nd_add", "batch_slices",
                     {random_tensor({2, 3, 2}, 18), indices_of({2, 0, 1, 1}, {2, 2, 1}),
                      random_tensor({2, 2, 2}, 19)},
                     batch1, scattered_nd(1)));
  // one_hot: negative classes count from the end.
  auto hot = [](const Inputs& in, int64_t classes, DType dtype) {
    HostTensor idx(in[0]);
    Shape::Dims dims(idx.shape.begin(), idx.shape.end());
    dims.push_back(classes);
    return build(Shape(dims), dtype, [&](const Index& o) {
      Index p(o.begin(), o.end() - 1);
      return resolved(idx.at(p), classes) == o.back() ? 1.0 : 0.0;
    });
  };
  rows.push_back(row("one_hot", "int64", {indices_of({0, 3, -1, 2, 1, 0}, {2, 3})},
                     {{"num_classes", int64_t{4}}},
                     [hot](const Inputs& in) { return hot(in, 4, DType::kInt64); }));
  rows.push_back(row("one_hot", "float32", {indices_of({2, -3}, {2})},
                     {{"num_classes", int64_t{3}}, {"dtype", DType::kFloat32}},
                     [hot](const Inputs& in) { return hot(in, 3, DType::kFloat32); }));
  return rows;
}

// Verifies that an index out of range is an error naming the op, the index,
// where it is in the indices and what it indexes, at the call or the read.
TEST(IndexingOpsTest, IndexOutOfRange) {
  Tensor x = random_tensor({2, 3}, 1);
  std::string what = error_of([&] {
    values_of(call("gather", {x, indices_of({0, 1, 3, 0}, {2, 2})}, {{"axis", int64_t{1}}})[0]);
  });
  EXPECT_THAT(what, HasSubstr("gather"));
  EXPECT_THAT(what, HasSubstr("index 3 at position [1, 0] of the indices (shape [2, 2]) is out of "
                              "range for axis 1 of size 3 in shape [2, 3] (valid: -3 to 2)"));
  what = error_of([&] {
    values_of(call("scatter_add", {x, indices_of({-3}, {1, 1}), random_tensor({1, 1}, 2)})[0]);
  });
  EXPECT_THAT(what, HasSubstr("scatter_add"));
  EXPECT_THAT(what, HasSubstr("index -3 at position [0, 0]"));
  what = error_of([&] { values_of(call("gather_nd", {x, indices_of({1, 2, 2, 0}, {2, 2})})[0]); });
  EXPECT_THAT(what, HasSubstr("index 2 at position [1, 0]"));
  EXPECT_THAT(what, HasSubstr("axis 0 of size 2"));
  what = error_of([&] {
    values_of(call("one_hot", {indices_of({1, 4}, {2})}, {{"num_classes", int64_t{4}}})[0]);
  });
  EXPECT_THAT(what, HasSubstr("one_hot"));
  EXPECT_THAT(what, HasSubstr("index 4 at position [1]"));
  EXPECT_THAT(what, HasSubstr("4 classes (valid: -4 to 3)"));
}

// Verifies that shapes, dtypes and attributes are checked at the call.
TEST(IndexingOpsTest, CallErrors) {
  Tensor x = random_tensor({2, 3}, 1);
  std::string what = error_of([&] { call("gather", {x, indices_of({0, 1}, {2})}); });
  EXPECT_THAT(what, HasSubstr("indices of shape [2] have rank 1 but x of shape [2, 3] has rank 2"));
  what = error_of([&] {
    call("gather", {x, indices_of({0, 0, 0, 0, 0, 0}, {3, 2})}, {{"axis", int64_t{1}}});
  });
  EXPECT_THAT(what, HasSubstr("longer than x of shape [2, 3] on axis 0"));
  what = error_of([&] { call("gather", {x, tensor_of({0, 0}, {1, 2}, DType::kInt32)}); });
  EXPECT_THAT(what, HasSubstr("indices must be int64, got int32"));
  what = error_of([&] {
    call("scatter", {x, indices_of({0, 1}, {1, 2}), random_tensor({2, 2}, 2)});
  });
  EXPECT_THAT(what, HasSubstr("src has shape [2, 2] but the indices have shape [1, 2]"));
  what = error_of([&] {
    call("scatter_add", {tensor_of({1, 0}, {2}, DType::kBool), indices_of({0}, {1}),
                         tensor_of({1}, {1}, DType::kBool)});
  });
  EXPECT_THAT(what, HasSubstr("adding bool values is not supported"));
  what = error_of([&] { call("gather_nd", {x, indices_of({0, 0, 0}, {1, 3})}); });
  EXPECT_THAT(what, HasSubstr("index tuples of 3 entries"));
  what = error_of([&] {
    call("gather_nd", {x, indices_of({0, 0, 0}, {3, 1})}, {{"batch_dims", int64_t{1}}});
  });
  EXPECT_THAT(what, HasSubstr("batch axis 0 has 3 in indices"));
  what = error_of([&] {
    call("scatter_nd_add", {x, indices_of({0}, {1, 1}), random_tensor({2}, 3)});
  });
  EXPECT_THAT(what, HasSubstr("updates have shape [2]"));
  EXPECT_THAT(what, HasSubstr("needs [1, 3]"));
  what = error_of([&] { call("one_hot", {indices_of({0}, {1})}, {{"num_classes", int64_t{0}}}); });
  EXPECT_THAT(what, HasSubstr("num_classes must be at least 1, got 0"));
  what = error_of([&] { call("one_hot", {indices_of({0}, {1})}); });
  EXPECT_THAT(what, HasSubstr("num_classes"));
}

}  // namespace
}  // namespace tandem::kernels::testing
