// libFuzzer target: serialization::parse_graph_json on arbitrary bytes
// (docs/security.md; how to run it: tests/fuzz/README.md).
//
// Every input must end in one of two ways: a GraphFile, or a tandem::Error
// saying what is wrong with the file. Anything else is a finding: another
// exception type escaping (libFuzzer reports it as a deadly signal), a crash,
// an ASan/UBSan report, a leak, a timeout, a large allocation, or an Error
// from a TANDEM_INTERNAL_ASSERT (a file reached a state our code thought
// impossible).
//
// A file that loads is also written back and loaded again: the writer must
// accept whatever the reader accepts, and load -> write -> load -> write must
// give the same text twice (one graph, one text: no jitter between writes).
// Then, within the work budget of run_model.h, it is loaded as a model with
// made-up params of the shapes its manifest states (load's passes run ops on
// them) and run once on made-up inputs.
#include <cstdint>
#include <string>
#include <utility>

#include "absl/types/span.h"

#include "core/error.h"
#include "kernels/registry.h"
#include "serialization/graph_file.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/run_model.h"

namespace {

using tandem::fuzz::finding;
using tandem::serialization::GraphFile;
using tandem::serialization::parse_graph_json;
using tandem::serialization::write_graph_json;

void expect_user_error(const tandem::Error& e) { tandem::fuzz::expect_user_error(e, "graph file"); }

absl::Span<const uint8_t> bytes_of(const std::string& text) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

void check_round_trip(const GraphFile& file) {
  std::string text;
  try {
    text = write_graph_json(file);
  } catch (const tandem::Error& e) {
    // The writer refuses what the format cannot hold; that is a message,
    // not a crash, but it must not be an internal assertion.
    expect_user_error(e);
    return;
  }
  std::string again;
  try {
    again = write_graph_json(parse_graph_json(bytes_of(text), "rewritten.json"));
  } catch (const tandem::Error& e) {
    finding("a graph file that loads was written back as one that does not",
            std::string(e.what()) + "\n--- written text:\n" + text);
  }
  if (again != text) {
    finding("load -> write -> load -> write changed the text",
            "--- first write:\n" + text + "\n--- second write:\n" + again);
  }
}

// The params file the manifest describes, with made-up values.
void run_with_made_up_params(GraphFile file) {
  tandem::serialization::ParamsFile params;
  params.entries = file.params;
  for (const tandem::serialization::ParamsEntry& entry : file.params) {
    params.tensors.push_back({entry.name, tandem::fuzz::made_up_tensor(entry.shape, entry.dtype)});
  }
  try {
    const tandem::LoadedModel model = tandem::load(std::move(file), std::move(params), "fuzz.json");
    tandem::fuzz::run_once(model, "graph file");
  } catch (const tandem::Error& e) {
    expect_user_error(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // The op registry (and oneDNN behind it) is built once per process; build
  // it here so that its cost is not charged to the first input.
  tandem::kernels::Registry::global();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  GraphFile file;
  try {
    file = parse_graph_json(absl::MakeConstSpan(data, size), "fuzz.json");
  } catch (const tandem::Error& e) {
    expect_user_error(e);
    return 0;
  }
  check_round_trip(file);
  if (tandem::fuzz::within_run_budget(file.graph)) run_with_made_up_params(std::move(file));
  return 0;
}
