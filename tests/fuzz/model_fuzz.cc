// libFuzzer target: a whole model, graph file and params file, loaded with
// tandem::load and run once (docs/security.md; how to
// run it: tests/fuzz/README.md).
//
// An input is the graph file's length as 4 bytes little-endian, the graph
// file, then the params file (tools/tandem.sh makes such seeds from the
// golden exports). Each file is parsed, then load() checks that they belong
// together and plans the graph (its passes run ops on the constants), and a
// graph within the work budget of run_model.h is run once on made-up inputs
// of its signature. Every step must end in a result or a tandem::Error;
// anything else (a crash, a sanitizer report, another exception type, a
// leak, a timeout, an Error from TANDEM_INTERNAL_ASSERT) is a finding.
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/types/span.h"

#include "core/error.h"
#include "kernels/registry.h"
#include "serialization/graph_file.h"
#include "serialization/model.h"
#include "serialization/params.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/run_model.h"

namespace {

constexpr std::string_view kKind = "model";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  tandem::kernels::Registry::global();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t json_length = 0;
  for (int i = 3; i >= 0; --i) json_length = (json_length << 8) | data[i];
  const auto rest = absl::MakeConstSpan(data + 4, size - 4);
  const size_t split = std::min<size_t>(json_length, rest.size());
  try {
    tandem::serialization::GraphFile graph =
        tandem::serialization::parse_graph_json(rest.subspan(0, split), "fuzz.json");
    if (!tandem::fuzz::within_run_budget(graph.graph)) return 0;
    tandem::serialization::ParamsFile params =
        tandem::serialization::parse_params(rest.subspan(split), "fuzz.params");
    const tandem::LoadedModel model =
        tandem::load(std::move(graph), std::move(params), "fuzz.json");
    tandem::fuzz::run_once(model, kKind);
  } catch (const tandem::Error& e) {
    tandem::fuzz::expect_user_error(e, kKind);
  }
  return 0;
}
