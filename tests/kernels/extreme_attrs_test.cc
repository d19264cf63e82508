// Extreme attribute values, as a model file may hold them: every size and
// index an op computes from its attributes is overflow-checked (Note
// [Checked size arithmetic] in core/shape.h), so each of these calls is a
// tandem::Error naming the op, never a crash or a write past a buffer. Run
// under AddressSanitizer, these tests also find a kernel that reads or writes
// out of bounds for attributes its inference let through.
//
// Two parts: a table of calls that must fail, each with the words its error
// must contain; and a sweep over every op in the registry that gives each
// integer and float attribute of one of the op's table rows
// (op_test_util.h) each extreme value in turn, and requires that the call
// and the read of its outputs either succeed or throw tandem::Error.
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <set>
#include <string>
#include <variant>
#include <vector>

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

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t k2To32 = int64_t{1} << 32;
constexpr int64_t k2To62 = int64_t{1} << 62;

struct BadCall {
  std::string name;
  std::string op;
  Inputs inputs;
  Attrs attrs;
  std::vector<std::string> message;  // Parts the error must contain, beside the op's name.
};

Tensor f64(Shape shape) { return random_tensor(std::move(shape), 1); }
Tensor nchw(int64_t n, int64_t c, int64_t h, int64_t w) { return f64({n, c, h, w}); }
Tensor indices_of(std::vector<double> values) {
  Shape shape{static_cast<int64_t>(values.size())};
  return tensor_of(std::move(values), shape, DType::kInt64);
}

Attrs conv(Ints stride, Ints padding, Ints dilation, int64_t groups = 1) {
  return {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}};
}
Attrs pool(Ints kernel, Ints stride, Ints padding) {
  return {{"kernel", kernel}, {"stride", stride}, {"padding", padding}};
}

std::vector<BadCall> bad_calls() {
  const Tensor x = nchw(1, 2, 5, 5), w = nchw(3, 2, 3, 3), b = f64({3});
  std::vector<BadCall> calls = {
      // pad: 2 + kMax + kMax wrapped to 0 and the kernel wrote past the output.
      {"pad_max",
       "pad",
       {f64({2, 3})},
       {{"pads", Ints{kMax, kMax, 0, 0}}},
       {"axis 0 of [2, 3] padded by pads[0]", "overflows int64"}},
      {"pad_after_max",
       "pad",
       {f64({2, 3})},
       {{"pads", Ints{0, 0, 1, kMax}}},
       {"pads[2] and pads[3]", "overflows int64"}},
      {"pad_min", "pad", {f64({2, 3})}, {{"pads", Ints{kMin, 0, 0, 0}}}, {"negative entry"}},
      {"pad_empty_max",
       "pad",
       {f64({0, 3})},
       {{"pads", Ints{0, 0, kMax, kMax}}},
       {"overflows int64"}},
      {"pad_value_nan_int",
       "pad",
       {tensor_of({1, 2}, {2}, DType::kInt32)},
       {{"pads", Ints{1, 1}}, {"value", std::nan("")}},
       {"value nan is not a value of int32"}},
      // conv2d: padding, stride, dilation and groups at the limits.
      {"conv_padding_max",
       "conv2d",
       {x, w, b},
       conv({1, 1}, {kMax, 0}, {1, 1}),
       {"twice the padding", "overflows int64"}},
      {"conv_padding_half_max",
       "conv2d",
       {x, w, b},
       conv({1, 1}, {kMax / 2, 0}, {1, 1}),
       {"the padded input of [1, 2, 5, 5]", "overflows int64"}},
      {"conv_padding_negative",
       "conv2d",
       {x, w, b},
       conv({1, 1}, {-1, 0}, {1, 1}),
       {"padding must be non-negative"}},
      {"conv_stride_zero",
       "conv2d",
       {x, w, b},
       conv({0, 1}, {0, 0}, {1, 1}),
       {"stride must be positive, got [0, 1]"}},
      {"conv_stride_min",
       "conv2d",
       {x, w, b},
       conv({1, kMin}, {0, 0}, {1, 1}),
       {"stride must be positive"}},
      {"conv_dilation_zero",
       "conv2d",
       {x, w, b},
       conv({1, 1}, {0, 0}, {0, 1}),
       {"dilation must be positive"}},
      {"conv_dilation_max",
       "conv2d",
       {x, w, b},
       conv({1, 1}, {0, 0}, {kMax, 1}),
       {"the dilated kernel height", "overflows int64"}},
      {"conv_groups_zero",
       "conv2d",
       {x, w, b},
       conv({1, 1}, {0, 0}, {1, 1}, 0),
       {"groups must be positive"}},
      {"conv_groups_min",
       "conv2d",
       {x, w, b},
       conv({1, 1}, {0, 0}, {1, 1}, kMin),
       {"groups must be positive"}},
      // w[1] * groups = 2^64 wrapped to 0 = the channels of an empty x.
      {"conv_groups_wrap",
       "conv2d",
       {nchw(1, 0, 5, 5), f64({0, 4, 3, 3}), f64({0})},
       conv({1, 1}, {0, 0}, {1, 1}, k2To62),
       {"the input channels of groups", "overflows int64"}},
      {"conv_backward_data_shape_max",
       "conv2d_backward_data",
       {f64({1, 3, 3, 3}), w},
       [] {
         Attrs a = conv({1, 1}, {0, 0}, {1, 1});
         a.set("input_shape", Ints{kMax, 2, 5, 5});
         return a;
       }(),
       {"overflows int64"}},
      {"conv_backward_weight_shape_negative",
       "conv2d_backward_weight",
       {x, f64({1, 3, 3, 3})},
       [] {
         Attrs a = conv({1, 1}, {0, 0}, {1, 1});
         a.set("weight_shape", Ints{3, 2, -1, 3});
         return a;
       }(),
       {"weight_shape must be 4 non-negative sizes"}},
      // Pooling: 2 * padding overflowed to negative and passed "at most half".
      {"pool_padding_max",
       "max_pool2d",
       {x},
       pool({3, 3}, {1, 1}, {kMax, 0}),
       {"must be at most half the kernel"}},
      {"pool_kernel_max",
       "avg_pool2d",
       {x},
       pool({kMax, 1}, {1, 1}, {0, 0}),
       {"kernel height", "is larger than the padded input"}},
      {"pool_kernel_area",
       "avg_pool2d",
       {nchw(1, 1, 1, 1)},
       pool({k2To32, k2To32}, {1, 1}, {k2To32 / 2, k2To32 / 2}),
       {"the kernel area of [4294967296, 4294967296]", "overflows int64"}},
      {"pool_stride_zero",
       "max_pool2d",
       {x},
       pool({2, 2}, {0, 2}, {0, 0}),
       {"stride must be positive"}},
      {"pool_kernel_negative",
       "avg_pool2d",
       {x},
       pool({-1, 2}, {}, {0, 0}),
       {"kernel must be positive"}},
      {"avg_pool_backward_shape_max",
       "avg_pool2d_backward",
       {f64({1, 2, 2, 2})},
       [] {
         Attrs a = pool({2, 2}, {}, {0, 0});
         a.set("input_shape", Ints{1, 2, kMax, kMax});
         return a;
       }(),
       {"overflows int64"}},
      {"adaptive_output_max",
       "adaptive_avg_pool2d",
       {nchw(0, 2, 5, 5)},
       {{"output_size", Ints{kMax, 1}}},
       {"an output size overflows int64 (9223372036854775807 + 1)"}},
      {"adaptive_output_large",
       "adaptive_avg_pool2d",
       {nchw(0, 2, 5, 5)},
       {{"output_size", Ints{k2To62, 1}}},
       {"the output size 4611686018427387904 + 1 times the input size + 1 of [0, 2, 5, 5]",
        "overflows int64"}},
      {"adaptive_output_zero",
       "adaptive_avg_pool2d",
       {x},
       {{"output_size", Ints{0, 1}}},
       {"output_size must be positive"}},
      // Shapes from attributes.
      {"reshape_product",
       "reshape",
       {f64({0})},
       {{"shape", Ints{k2To32, k2To32, 0}}},
       {"reshape element count overflows int64"}},
      {"reshape_min",
       "reshape",
       {f64({2, 3})},
       {{"shape", Ints{kMin, 6}}},
       {"invalid dimension -9223372036854775808"}},
      {"reshape_infer_zero",
       "reshape",
       {f64({0})},
       {{"shape", Ints{-1, 0}}},
       {"is not a multiple of 0"}},
      {"expand_product", "expand", {f64({1, 1})}, {{"shape", Ints{kMax, 2}}}, {"overflows int64"}},
      {"expand_min", "expand", {f64({1})}, {{"shape", Ints{kMin}}}, {"invalid dimension"}},
      {"concat_sum",
       "concat",
       {f64({0, kMax / 2 + 1}), f64({0, kMax / 2 + 1})},
       {{"axis", int64_t{1}}},
       {"the concatenated size of axis 1", "overflows int64"}},
      {"concat_axis",
       "concat",
       {f64({2}), f64({3})},
       {{"axis", k2To32}},
       {"axis 4294967296 is out of range for shape [2] of rank 1"}},
      {"stack_axis", "stack", {f64({2}), f64({2})}, {{"axis", kMin}}, {"out of range"}},
      {"split_max", "split", {f64({4})}, {{"sizes", Ints{kMax, 1}}}, {"add up to more than 4"}},
      {"split_min", "split", {f64({4})}, {{"sizes", Ints{kMin, 4}}}, {"negative entry"}},
      {"split_axis",
       "split",
       {f64({4})},
       {{"axis", k2To32}, {"sizes", Ints{4}}},
       {"axis 4294967296 is out of range"}},
      {"slice_step_zero", "slice", {f64({4})}, {{"step", int64_t{0}}}, {"step must be positive"}},
      {"slice_step_min", "slice", {f64({4})}, {{"step", kMin}}, {"step must be positive"}},
      {"slice_axis", "slice", {f64({4})}, {{"axis", k2To32}}, {"axis 4294967296 is out of range"}},
      {"slice_backward_size_min",
       "slice_backward",
       {f64({2})},
       {{"size", kMin}},
       {"size must be non-negative"}},
      {"slice_backward_size_max",
       "slice_backward",
       {f64({2})},
       {{"size", kMax}, {"begin", kMax - 2}},
       {"tensor byte size overflows int64"}},
      {"flatten_axes", "flatten", {f64({2, 3})}, {{"start_axis", k2To32}}, {"out of range"}},
      {"transpose_perm",
       "transpose",
       {f64({2, 3})},
       {{"perm", Ints{k2To32, 0}}},
       {"axis 4294967296 is out of range"}},
      {"take_axis",
       "take",
       {f64({3}), indices_of({0})},
       {{"axis", k2To32}},
       {"axis 4294967296 is out of range"}},
      {"index_add_axis",
       "index_add",
       {f64({3}), indices_of({0}), f64({1})},
       {{"axis", kMin}},
       {"out of range"}},
      // Axes narrowed to int: 2^32 became axis 0.
      {"softmax_axis",
       "softmax",
       {f64({2, 3})},
       {{"axis", k2To32}},
       {"axis 4294967296 is out of range for shape [2, 3] of rank 2"}},
      {"log_softmax_axis",
       "log_softmax",
       {f64({2, 3})},
       {{"axis", k2To32 + 1}},
       {"axis 4294967297 is out of range for shape [2, 3] of rank 2"}},
      {"argmax_axis",
       "argmax",
       {f64({2, 3})},
       {{"axis", k2To32}},
       {"axis 4294967296 is out of range for shape [2, 3] of rank 2"}},
      {"sum_axes",
       "sum",
       {f64({2, 3})},
       {{"axes", Ints{k2To32}}},
       {"axis 4294967296 is out of range"}},
      {"var_axes", "var", {f64({2, 3})}, {{"axes", Ints{kMin}}}, {"out of range"}},
      {"layer_norm_axes",
       "layer_norm",
       {f64({2, 3}), f64({3}), f64({3})},
       {{"normalized_axes", k2To32 + 1}},
       {"normalized_axes must be in [1, 2]"}},
      // Creation: shapes and values.
      {"zeros_product",
       "zeros",
       {},
       {{"shape", Ints{k2To32, k2To32}}},
       {"shape element count overflows int64"}},
      {"zeros_negative", "zeros", {}, {{"shape", Ints{kMin}}}, {"negative dimension"}},
      {"ones_bytes", "ones", {}, {{"shape", Ints{kMax}}}, {"tensor byte size overflows int64"}},
      {"rand_product",
       "rand",
       {},
       {{"shape", Ints{kMax, 2}}, {"seed", int64_t{1}}},
       {"overflows int64"}},
      {"randn_negative", "randn", {}, {{"shape", Ints{-1}}, {"seed", kMin}}, {"negative"}},
      {"full_huge_int",
       "full",
       {},
       {{"shape", Ints{2}}, {"dtype", DType::kInt32}, {"value", 1e300}},
       {"value 1e+300 is not a value of int32"}},
      {"full_nan_int",
       "full",
       {},
       {{"shape", Ints{2}}, {"dtype", DType::kInt64}, {"value", std::nan("")}},
       {"value nan is not a value of int64"}},
      {"full_fraction_uint8",
       "full",
       {},
       {{"shape", Ints{2}}, {"dtype", DType::kUInt8}, {"value", 2.5}},
       {"value 2.5 is not a value of uint8"}},
      {"full_negative_uint8",
       "full",
       {},
       {{"shape", Ints{2}}, {"dtype", DType::kUInt8}, {"value", -1.0}},
       {"value -1 is not a value of uint8"}},
      {"arange_beyond_int32",
       "arange",
       {},
       {{"start", 0.0}, {"stop", 1e10}, {"step", 1e9}, {"dtype", DType::kInt32}},
       {"reaches 9e+09, which is out of range for int32"}},
      // Batch norm: one value per channel has no batch statistics.
      {"batch_norm_one_value",
       "batch_norm",
       {f64({1, 3}), f64({3}), f64({3}), f64({3}), f64({3})},
       {{"training", true}},
       {"expected more than 1 value per channel when training, got input of shape [1, 3]"}},
      {"batch_norm_one_pixel",
       "batch_norm",
       {nchw(1, 2, 1, 1), f64({2}), f64({2}), f64({2}), f64({2})},
       {{"training", true}},
       {"expected more than 1 value per channel when training, got input of shape [1, 2, 1, 1]"}},
  };
  return calls;
}

// Failures name the case, not its bytes.
void PrintTo(const BadCall& c, std::ostream* os) { *os << c.name; }

class BadCallTest : public ::testing::TestWithParam<BadCall> {};

// Verifies that each extreme call throws tandem::Error at the call, naming
// the op and the offending attribute or shape.
TEST_P(BadCallTest, IsAnErrorNamingTheOp) {
  const BadCall& c = GetParam();
  std::string what = error_of([&] { call(c.op, c.inputs, c.attrs); });
  EXPECT_THAT(what, HasSubstr(c.op + ": "));
  for (const std::string& part : c.message) EXPECT_THAT(what, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(Extremes, BadCallTest, ::testing::ValuesIn(bad_calls()),
                         [](const ::testing::TestParamInfo<BadCall>& info) {
                           return info.param.name;
                         });

// Values the sweep gives each integer attribute (or each entry of a list of
// integers): the limits, their neighbours, -1 and 0. Moderately large but
// valid sizes (2^33 elements, say) are left out on purpose: they would
// allocate gigabytes rather than fail.
const int64_t kExtremeInts[] = {kMax, kMin, kMax - 1, kMin + 1, k2To62, -k2To62, -1, 0};
const double kExtremeFloats[] = {std::nan(""), INFINITY, -INFINITY, 1e300, -1e300};

// Runs one call and reads every output, which runs the kernel: true when it
// succeeded, false when it threw tandem::Error. Anything else (another
// exception, a crash, a sanitizer report) fails the test.
bool runs_or_refuses(const std::string& op, const Inputs& inputs, const Attrs& attrs) {
  try {
    for (const Tensor& t : call(op, inputs, attrs)) values_of(t);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The attribute sets of the sweep for `row`: each integer attribute, each
// entry of each integer list and all its entries at once (pads of INT64_MAX
// on both sides of an axis) set to every extreme value, each float attribute
// to every extreme float.
std::vector<Attrs> extreme_variants(const OpDef& op, const Attrs& base) {
  Attrs given = resolve_attrs(op, base);
  std::vector<Attrs> variants;
  for (const auto& [name, value] : given.items()) {
    if (std::holds_alternative<int64_t>(value)) {
      for (int64_t extreme : kExtremeInts) variants.push_back(Attrs(given).set(name, extreme));
    } else if (const auto* ints = std::get_if<Ints>(&value)) {
      for (int64_t extreme : kExtremeInts) {
        for (size_t i = 0; i < ints->size(); ++i) {
          Ints changed = *ints;
          changed[i] = extreme;
          variants.push_back(Attrs(given).set(name, changed));
        }
        if (ints->size() > 1)
          variants.push_back(Attrs(given).set(name, Ints(ints->size(), extreme)));
      }
    } else if (std::holds_alternative<double>(value)) {
      for (double extreme : kExtremeFloats) variants.push_back(Attrs(given).set(name, extreme));
    }
  }
  return variants;
}

// Verifies, for every op, that every extreme value of every attribute of the
// op's first table row for each input dtype (so float32 rows reach the oneDNN
// kernels, float64 ones the plain loops) either works or is a tandem::Error
// (run under ASan, also that no kernel touches memory it does not own).
TEST(ExtremeAttrsTest, EveryOpRefusesOrRunsEveryExtremeAttribute) {
  std::set<std::string> swept;
  int64_t calls = 0, refused = 0;
  for (const auto& [family, rows] : registered_row_families()) {
    for (const OpTestCase& row : rows()) {
      std::string dtype(row.inputs.empty() ? "none" : dtype_name(row.inputs[0].dtype()));
      if (!swept.insert(row.op + " " + dtype).second) continue;
      SCOPED_TRACE(row.op + " (row " + row.name + ")");
      const OpDef& op = Registry::global().get(row.op);
      for (const Attrs& attrs : extreme_variants(op, row.attrs)) {
        SCOPED_TRACE(attrs.to_string());
        ++calls;
        refused += !runs_or_refuses(row.op, row.inputs, attrs);
      }
    }
  }
  // The sweep reached the ops' attributes, and most extremes are refused.
  EXPECT_GT(calls, 1000);
  EXPECT_GT(refused, calls / 2);
}

}  // namespace
}  // namespace tandem::kernels::testing
