// Rows for device_copy.cc. On the CPU to_device is a plain copy; the op
// table's "_cuda" variant of each row (op_table_test.cc) moves data to and
// from a GPU where there is one.
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

TANDEM_OP_TEST_ROWS(device_copy) {
  auto same = [](const Inputs& in) { return std::vector<Tensor>{in[0]}; };
  return {
      {.name = "float64",
       .op = "to_device",
       .inputs = {random_tensor({2, 3}, 1)},
       .attrs = {{"device", std::string("cpu")}},
       .reference = same},
      {.name = "int64_empty",
       .op = "to_device",
       .inputs = {tensor_of({}, {0, 4}, DType::kInt64)},
       .attrs = {{"device", std::string("cpu")}},
       .reference = same,
       .check_gradient = false},
  };
}

TEST(DeviceCopyTest, NamesADeviceThisMachineDoesNotHave) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  Tensor x = random_tensor({2}, 1);
  try {
    call1("to_device", {x}, {{"device", std::string("cuda:0")}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("to_device"), std::string::npos) << e.what();
  }
}

TEST(DeviceCopyTest, RejectsABadDeviceName) {
  EXPECT_THROW(call1("to_device", {random_tensor({2}, 1)}, {{"device", std::string("tpu")}}),
               Error);
}

}  // namespace
}  // namespace tandem::kernels::testing
