// libFuzzer target: an ONNX file, imported with tandem::import_onnx and run
// once (docs/security.md; how to run it: tests/fuzz/README.md).
//
// The seeds are ONNX's own backend test models (Debian's libonnx-testdata,
// copied in by tools/tandem.sh). Parsing, the signature, every initializer,
// the conversion of each node (with what it computes at import) and the fit
// of free dimensions (serialization::read_onnx) must end in a graph or a
// tandem::Error; a graph within the work budget of run_model.h is then
// loaded (load's passes and memory plan) and run once on made-up inputs of
// its signature. Anything else (a crash, a sanitizer
// report, another exception type, a leak, a timeout, an Error from
// TANDEM_INTERNAL_ASSERT) is a finding.
#include <cstdint>
#include <utility>

#include "absl/types/span.h"

#include "core/error.h"
#include "kernels/registry.h"
#include "serialization/onnx_import.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/run_model.h"

namespace {

constexpr std::string_view kKind = "onnx";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  tandem::kernels::Registry::global();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tandem::serialization::OnnxGraph g =
        tandem::serialization::read_onnx(absl::MakeConstSpan(data, size), "fuzz.onnx");
    // Loading plans the graph's memory: only graphs within the budget.
    if (!tandem::fuzz::within_run_budget(g.graph)) return 0;
    const tandem::LoadedModel model =
        tandem::load_graph(g.graph, g.state, g.symbolic, std::move(g.sources), g.name);
    tandem::fuzz::run_once(model, kKind);
  } catch (const tandem::Error& e) {
    tandem::fuzz::expect_user_error(e, kKind);
  }
  return 0;
}
