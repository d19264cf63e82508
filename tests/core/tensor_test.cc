#include "core/tensor.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/error.h"

namespace tandem {
namespace {

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Runs `fn`, which must throw tandem::Error, and returns the error.
template <class Fn>
Error thrown_by(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tandem::Error was thrown";
  return Error("nothing thrown");
}

std::vector<float> iota_floats(int n) {
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), 0.0f);
  return values;
}

// A rank-0 shape, passed by name: GCC 12 warns (falsely) when an empty Shape temporary is moved.
const Shape kScalar;

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kStorageAlignment == 0; }

// Verifies that empty() records shape, dtype, device and byte size, and aligns its data.
TEST(TensorTest, EmptyShapeDtypeAndBytes) {
  struct Row {
    Shape shape;
    DType dtype;
    size_t nbytes;
  };
  const Row rows[] = {
      {Shape{2, 3}, DType::kFloat32, 24}, {Shape{2, 3}, DType::kFloat64, 48},
      {Shape{}, DType::kFloat32, 4},      {Shape{0, 5}, DType::kInt64, 0},
      {Shape{7}, DType::kBool, 7},        {Shape{3, 3}, DType::kFloat16, 18},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.shape.to_string());
    Tensor t = Tensor::empty(row.shape, row.dtype);
    EXPECT_TRUE(t.defined());
    EXPECT_EQ(t.shape(), row.shape);
    EXPECT_EQ(t.dtype(), row.dtype);
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_EQ(t.rank(), row.shape.rank());
    EXPECT_EQ(t.numel(), row.shape.numel());
    EXPECT_EQ(t.nbytes(), row.nbytes);
    EXPECT_EQ(t.byte_offset(), 0u);
    EXPECT_GE(t.storage()->nbytes(), row.nbytes);
    EXPECT_TRUE(aligned(t.raw_data()));
    EXPECT_NE(t.var(), nullptr);
  }
}

// Verifies that a tensor on a device without an allocator is a tandem::Error.
TEST(TensorTest, EmptyOnCudaThrows) {
  EXPECT_THROW(Tensor::empty({2}, DType::kFloat32, Device::cuda(0)), Error);
}

template <class T>
void expect_round_trip(const std::vector<T>& values, const Shape& shape) {
  Tensor t = Tensor::from_vector<T>(absl::Span<const T>(values.data(), values.size()), shape);
  EXPECT_EQ(t.dtype(), dtype_of<T>());
  EXPECT_EQ(t.shape(), shape);
  EXPECT_TRUE(aligned(t.raw_data()));
  std::vector<T> back = t.to_vector<T>();
  ASSERT_EQ(back.size(), values.size());
  if (!values.empty()) {  // memcmp may not be given the null data of an empty vector.
    EXPECT_EQ(std::memcmp(back.data(), values.data(), values.size() * sizeof(T)), 0);
  }
}

// Verifies that from_vector then to_vector gives back the same elements, for every dtype.
TEST(TensorTest, FromVectorToVectorRoundTripEveryDtype) {
  expect_round_trip<float>({1.5f, -2.0f, 3.25f, 1e30f, -0.0f, 6.0f}, {2, 3});
  expect_round_trip<double>({1e-300, -2.5, 3.0}, {3});
  expect_round_trip<Half>({Half(1.0f), Half(-0.5f), Half(65504.0f), Half(0.0f)}, {2, 2});
  expect_round_trip<BFloat16>({BFloat16(3.0f), BFloat16(-1e38f)}, {2, 1});
  expect_round_trip<int32_t>({INT32_MIN, -1, 0, INT32_MAX}, {4});
  expect_round_trip<int64_t>({INT64_MIN, INT64_MAX, 7}, {1, 3});
  expect_round_trip<uint8_t>({0, 1, 255}, {3});
  expect_round_trip<int32_t>({42}, {});
  expect_round_trip<float>({}, {0, 4});

  // std::vector<bool> has no contiguous data, so bools go through a plain array.
  const bool flags[] = {true, false, false, true, true};
  Tensor b = Tensor::from_vector<bool>(absl::Span<const bool>(flags), {5});
  EXPECT_EQ(b.dtype(), DType::kBool);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, false, true, true}));
}

// Verifies that from_vector with the wrong element count throws naming the shape and the line.
TEST(TensorTest, FromVectorWrongCountThrowsNamingShape) {
  std::vector<float> three{1, 2, 3};
  const int line = __LINE__ + 1;
  Error e = thrown_by([&] { Tensor::from_vector(three, {2, 2}); });
  EXPECT_TRUE(contains(e.what(), "[2, 2]")) << e.what();
  EXPECT_TRUE(contains(e.what(), "3 values")) << e.what();
  EXPECT_EQ(e.op(), "from_vector");
  EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
}

// Verifies that reading with the wrong element type throws naming both dtypes.
TEST(TensorTest, WrongElementTypeThrowsNamingBothDtypes) {
  Tensor t = Tensor::from_vector(std::vector<int32_t>{1, 2}, {2});
  for (const std::string& what : {std::string(thrown_by([&] { t.to_vector<float>(); }).what()),
                                  std::string(thrown_by([&] { t.data<int64_t>(); }).what()),
                                  std::string(thrown_by([&] {
                                                t.reshape({1, 2}).to_vector<double>();
                                              }).what())}) {
    EXPECT_TRUE(contains(what, "int32")) << what;
    EXPECT_TRUE(contains(what, "float32") || contains(what, "int64") || contains(what, "float64"))
        << what;
  }
  Error e = thrown_by([&] { t.to_vector<float>(); });
  EXPECT_TRUE(contains(e.what(), "float32")) << e.what();
  EXPECT_TRUE(contains(e.what(), "int32")) << e.what();
  EXPECT_EQ(t.data<int32_t>(), t.raw_data());
}

// Verifies that item() returns the only element and rejects tensors with other counts.
TEST(TensorTest, ItemNeedsExactlyOneElement) {
  EXPECT_EQ(Tensor::from_vector(std::vector<int64_t>{7}, kScalar).item<int64_t>(), 7);
  EXPECT_EQ(Tensor::from_vector(std::vector<double>{2.5}, {1, 1}).item<double>(), 2.5);
  Tensor two = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  Error e = thrown_by([&] { two.item<float>(); });
  EXPECT_TRUE(contains(e.what(), "[2]")) << e.what();
  EXPECT_EQ(e.op(), "item");
  Tensor none = Tensor::empty({0});
  EXPECT_THROW(none.item<float>(), Error);
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1}, kScalar).item<int32_t>(), Error);
}

struct ReshapeRow {
  std::vector<int64_t> request;
  Shape result;
};

// Verifies that reshape infers a -1 dimension and keeps the data in order.
TEST(TensorTest, ReshapeInfersMinusOne) {
  Tensor t = Tensor::from_vector(iota_floats(24), {2, 3, 4});
  const ReshapeRow rows[] = {
      {{-1}, Shape{24}},
      {{4, -1}, Shape{4, 6}},
      {{-1, 2, 3}, Shape{4, 2, 3}},
      {{2, 3, 4}, Shape{2, 3, 4}},
      {{1, 24, 1}, Shape{1, 24, 1}},
      {{2, -1, 1, 3}, Shape{2, 4, 1, 3}},
  };
  for (const ReshapeRow& row : rows) {
    SCOPED_TRACE(row.result.to_string());
    Tensor r = t.reshape(row.request);
    EXPECT_EQ(r.shape(), row.result);
    EXPECT_EQ(r.to_vector<float>(), iota_floats(24));
  }
  Tensor scalar = Tensor::from_vector(std::vector<float>{5}, {1, 1});
  EXPECT_EQ(scalar.reshape({}).shape(), Shape{});
  EXPECT_EQ(scalar.reshape({}).reshape({-1}).shape(), Shape{1});
  EXPECT_EQ(Tensor::empty({0, 3}).reshape({3, 0, 5}).shape(), (Shape{3, 0, 5}));
}

// Verifies that bad reshapes are tandem::Errors that name the op and the caller's line.
TEST(TensorTest, ReshapeErrorsNameUserLine) {
  Tensor t = Tensor::from_vector(iota_floats(6), {2, 3});
  struct Row {
    std::vector<int64_t> request;
    const char* expect;
  };
  const Row rows[] = {
      {{-1, -1}, "-1"}, {{4}, "[2, 3]"}, {{4, -1}, "multiple of 4"},
      {{-2, 3}, "-2"},  {{0, -1}, "-1"}, {{int64_t{1} << 62, 8}, "overflow"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(::testing::PrintToString(row.request));
    const int line = __LINE__ + 1;
    Error e = thrown_by([&] { t.reshape(row.request); });
    EXPECT_TRUE(contains(e.what(), row.expect)) << e.what();
    EXPECT_EQ(e.op(), "reshape");
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(line)) << e.what();
  }
}

// Verifies that reshape, slice and [] return views on the same storage and var, at the right
// byte offset, and that they read the base's data.
TEST(TensorTest, ViewsShareStorageAndVar) {
  Tensor base = Tensor::from_vector(iota_floats(24), {2, 3, 4});
  struct Row {
    const char* what;
    Tensor view;
    Shape shape;
    size_t byte_offset;
    std::vector<float> values;
  };
  const Row rows[] = {
      {"reshape", base.reshape({4, 6}), Shape{4, 6}, 0, iota_floats(24)},
      {"slice",
       base.slice(1, 2),
       Shape{1, 3, 4},
       48,
       {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}},
      {"empty slice", base.slice(2, 2), Shape{0, 3, 4}, 96, {}},
      {"row", base[1], Shape{3, 4}, 48, {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}},
      {"row of row", base[1][2], Shape{4}, 80, {20, 21, 22, 23}},
      {"element", base[0][1][3], Shape{}, 28, {7}},
      {"slice of row", base[1].slice(1, 3), Shape{2, 4}, 64, {16, 17, 18, 19, 20, 21, 22, 23}},
      {"reshape of slice",
       base.reshape({6, 4}).slice(4, 6).reshape({-1}),
       Shape{8},
       64,
       {16, 17, 18, 19, 20, 21, 22, 23}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    EXPECT_EQ(row.view.shape(), row.shape);
    EXPECT_EQ(row.view.storage().get(), base.storage().get());
    EXPECT_EQ(row.view.var(), base.var());
    EXPECT_EQ(row.view.byte_offset(), row.byte_offset);
    EXPECT_EQ(row.view.raw_data(), static_cast<char*>(base.raw_data()) + row.byte_offset);
    EXPECT_EQ(row.view.to_vector<float>(), row.values);
  }
}

// Verifies that a view outlives its base: the storage stays alive through the view.
TEST(TensorTest, ViewKeepsStorageAlive) {
  Tensor row;
  {
    Tensor base = Tensor::from_vector(iota_floats(6), {3, 2});
    row = base[2];
  }
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{4, 5}));
}

// Verifies that slice and [] reject out-of-range rows and scalars.
TEST(TensorTest, SliceOutOfRangeThrows) {
  Tensor t = Tensor::from_vector(iota_floats(6), {3, 2});
  const std::pair<int64_t, int64_t> bad[] = {{2, 1}, {-1, 1}, {0, 4}, {4, 5}, {3, 4}};
  for (auto [begin, end] : bad) {
    SCOPED_TRACE(str_cat(begin, ":", end));
    const int line = __LINE__ + 1;
    Error e = thrown_by([&] { t.slice(begin, end); });
    EXPECT_TRUE(contains(e.what(), "out of range")) << e.what();
    EXPECT_TRUE(contains(e.what(), "[3, 2]")) << e.what();
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  }
  EXPECT_THROW(t[3], Error);
  EXPECT_THROW(t[-1], Error);
  EXPECT_THROW(t[0][0][0], Error);  // [0][0] is a scalar.
  EXPECT_NO_THROW(t.slice(3, 3));
}

// Verifies that an out-of-range [] does not claim a line inside Tandem as the user's line: the
// error must point at the caller or at no line at all.
TEST(TensorTest, IndexErrorDoesNotBlameTandemSource) {
  Tensor t = Tensor::from_vector(iota_floats(6), {3, 2});
  Error e = thrown_by([&] { t[3]; });
  EXPECT_TRUE(contains(e.what(), "out of range")) << e.what();
  EXPECT_FALSE(contains(e.where().file_name(), "core/tensor.cc")) << e.what();
}

// Verifies that an undefined tensor reports errors instead of crashing.
TEST(TensorTest, UndefinedTensorThrows) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THROW(t.shape(), Error);
  EXPECT_THROW(t.dtype(), Error);
  EXPECT_THROW(t.device(), Error);
  EXPECT_THROW(t.numel(), Error);
  EXPECT_THROW(t.nbytes(), Error);
  EXPECT_THROW(t.var(), Error);
  EXPECT_THROW(t.storage(), Error);
  EXPECT_THROW(t.raw_data(), Error);
  EXPECT_THROW(t.data<float>(), Error);
  EXPECT_THROW(t.reshape({-1}), Error);
  EXPECT_THROW(t.slice(0, 0), Error);
  EXPECT_THROW(t[0], Error);
  EXPECT_THROW(t.wait_to_read(), Error);
  EXPECT_THROW(t.to_vector<float>(), Error);
  EXPECT_THROW(t.item<float>(), Error);
  EXPECT_EQ(t.to_string(), "Tensor(undefined)");
  Error e = thrown_by([&] { t.shape(); });
  EXPECT_TRUE(contains(e.what(), "undefined")) << e.what();
}

// Verifies that to_string prints the header and all values of a small tensor.
TEST(TensorTest, ToStringPrintsValues) {
  struct Row {
    Tensor tensor;
    const char* text;
  };
  const bool flags[] = {true, false};
  const Row rows[] = {
      {Tensor::from_vector(std::vector<float>{1, 2.5f, -3, 4}, {2, 2}),
       "Tensor[2, 2] float32 cpu\n[[1, 2.5],\n[-3, 4]]"},
      {Tensor::from_vector(std::vector<int64_t>{42}, kScalar), "Tensor[] int64 cpu\n42"},
      {Tensor::from_vector(std::vector<uint8_t>{0, 255}, {2}), "Tensor[2] uint8 cpu\n[0, 255]"},
      {Tensor::from_vector<bool>(absl::Span<const bool>(flags), {2}),
       "Tensor[2] bool cpu\n[true, false]"},
      {Tensor::from_vector(std::vector<Half>{Half(0.5f), Half(-2.0f)}, {2}),
       "Tensor[2] float16 cpu\n[0.5, -2]"},
      {Tensor::from_vector(std::vector<BFloat16>{BFloat16(3.0f)}, {1}),
       "Tensor[1] bfloat16 cpu\n[3]"},
      {Tensor::empty({0}), "Tensor[0] float32 cpu\n[]"},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(row.tensor.to_string(), row.text);
  }
}

// Verifies that tensors above 1000 elements are summarized with "..." and smaller ones are not.
TEST(TensorTest, ToStringSummarizesBigTensors) {
  std::vector<int32_t> values(2000);
  std::iota(values.begin(), values.end(), 0);
  std::string big = Tensor::from_vector(values, {2000}).to_string();
  EXPECT_EQ(big, "Tensor[2000] int32 cpu\n[0, 1, 2, ..., 1997, 1998, 1999]");

  std::string matrix = Tensor::from_vector(values, {50, 40}).to_string();
  EXPECT_TRUE(contains(matrix, "[0, 1, 2, ..., 37, 38, 39]")) << matrix;
  EXPECT_TRUE(contains(matrix, "[1960, 1961, 1962, ..., 1997, 1998, 1999]")) << matrix;
  EXPECT_FALSE(contains(matrix, "[200, ")) << matrix;  // Row 5 is elided.

  values.resize(1000);
  std::string full = Tensor::from_vector(values, {1000}).to_string();
  EXPECT_FALSE(contains(full, "...")) << full;
  EXPECT_TRUE(contains(full, ", 500, ")) << full;
}

// Verifies that a value written by an engine op is what to_vector sees.
TEST(TensorTest, EngineWriteIsVisibleToToVector) {
  Tensor t = Tensor::from_vector(std::vector<float>{0, 1, 2}, {3});
  tandem::engine::current().push(
      [p = t.data<float>()](const tandem::engine::RunContext&) { p[0] = 42; },
      tandem::Device::cpu(), {}, {t.var()}, "write");
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{42, 1, 2}));
}

// Verifies that a write through the base is seen by a view (they share one var).
TEST(TensorTest, EngineWriteToBaseIsVisibleThroughView) {
  Tensor base = Tensor::from_vector(iota_floats(6), {2, 3});
  Tensor row = base[1];
  float* p = base.data<float>();
  engine::current().push(
      [p](const engine::RunContext&) {
        for (int i = 0; i < 6; ++i) p[i] = static_cast<float>(10 * i);
      },
      Device::cpu(), {}, {base.var()}, "fill");
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{30, 40, 50}));
  EXPECT_EQ(row[2].item<float>(), 50);
}

// Verifies that a failed producing op makes to_vector throw, naming the op and the push line.
TEST(TensorTest, FailedProducerMakesToVectorThrow) {
  Tensor t = Tensor::empty({2});
  auto explode = [](const engine::RunContext&) { throw std::runtime_error("kaboom"); };
  const int push_line = __LINE__ + 1;
  engine::current().push(explode, Device::cpu(), {}, {t.var()}, "exploding_op");
  Error e = thrown_by([&] { t.to_vector<float>(); });
  EXPECT_TRUE(contains(e.what(), "exploding_op")) << e.what();
  EXPECT_TRUE(contains(e.what(), "kaboom")) << e.what();
  EXPECT_EQ(e.where().line(), static_cast<unsigned>(push_line)) << e.what();
  // A view shares the var, so it fails too; so does wait_to_read.
  EXPECT_THROW(t.reshape({2, 1}).to_vector<float>(), Error);
  EXPECT_THROW(t.wait_to_read(), Error);
}

}  // namespace
}  // namespace tandem
