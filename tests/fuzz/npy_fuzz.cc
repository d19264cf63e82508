// libFuzzer target: serialization::parse_npy on arbitrary bytes (the inputs
// tools/tandem-run reads; how to run it: tests/fuzz/README.md).
//
// Every input must end in a Tensor or a tandem::Error; anything else
// (another exception type, a crash, a sanitizer report, a leak, a timeout, a
// large allocation, an Error from TANDEM_INTERNAL_ASSERT) is a finding. A
// tensor that loads must fit in the file, and its first and last byte are
// read, so that ASan sees storage shorter than the shape says.
#include <cstdint>
#include <string_view>

#include "absl/types/span.h"

#include "core/error.h"
#include "core/tensor.h"
#include "serialization/npy.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using tandem::fuzz::finding;

void expect_user_error(const tandem::Error& e) { tandem::fuzz::expect_user_error(e, ".npy file"); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::Tensor tensor;
  try {
    tensor = tandem::serialization::parse_npy(absl::MakeConstSpan(data, size), "fuzz.npy");
  } catch (const tandem::Error& e) {
    expect_user_error(e);
    return 0;
  }
  const size_t nbytes = tensor.nbytes();
  if (nbytes > size) {
    finding("a loaded tensor is larger than the file",
            tandem::str_cat(tensor.shape().to_string(), " is ", nbytes, " bytes, the file ", size));
  }
  if (nbytes > 0) {
    const auto* first = static_cast<const volatile uint8_t*>(tensor.raw_data());
    static_cast<void>(first[0]);
    static_cast<void>(first[nbytes - 1]);
  }
  return 0;
}
