// libFuzzer target: serialization::parse_params on arbitrary bytes
// (docs/security.md; how to run it: tests/fuzz/README.md).
//
// Every input must end in a ParamsFile or a tandem::Error; anything else
// (another exception type, a crash, a sanitizer report, a leak, a timeout, a
// large allocation, an Error from TANDEM_INTERNAL_ASSERT) is a finding. A
// file that loads is checked against its own index, and the first and last
// byte of every tensor are read, so that ASan sees a tensor whose storage is
// shorter than its shape says.
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/error.h"
#include "serialization/params.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using tandem::fuzz::finding;
using tandem::serialization::ParamsEntry;
using tandem::serialization::ParamsFile;

void expect_user_error(const tandem::Error& e) {
  tandem::fuzz::expect_user_error(e, "params file");
}

void check_loaded(const ParamsFile& params, size_t file_size) {
  if (params.entries.size() != params.tensors.size()) {
    finding("index and tensors disagree", tandem::str_cat(params.entries.size(), " entries, ",
                                                          params.tensors.size(), " tensors"));
  }
  for (size_t i = 0; i < params.entries.size(); ++i) {
    const ParamsEntry& entry = params.entries[i];
    const tandem::Tensor& tensor = params.tensors[i].tensor;
    if (params.tensors[i].name != entry.name || tensor.shape() != entry.shape ||
        tensor.dtype() != entry.dtype || tensor.nbytes() != entry.length ||
        entry.offset > file_size || entry.length > file_size - entry.offset) {
      finding("a loaded tensor disagrees with its index entry or the file's size",
              tandem::str_cat("entry ", i, " '", entry.name, "' ", entry.shape.to_string(),
                              " offset ", entry.offset, " length ", entry.length, "; tensor ",
                              tensor.shape().to_string(), " ", tensor.nbytes(), " bytes; file ",
                              file_size, " bytes"));
    }
    if (entry.length > 0) {
      const auto* first = static_cast<const volatile uint8_t*>(tensor.raw_data());
      static_cast<void>(first[0]);
      static_cast<void>(first[entry.length - 1]);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParamsFile params;
  try {
    params = tandem::serialization::parse_params(absl::MakeConstSpan(data, size), "fuzz.params");
  } catch (const tandem::Error& e) {
    expect_user_error(e);
    return 0;
  }
  check_loaded(params, size);
  return 0;
}
