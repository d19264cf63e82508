// ONNX's own backend tests (Debian's libonnx-testdata) through the importer:
// each case is a model.onnx with test_data_set_*/input_*.pb and the expected
// output_*.pb. A case passes when every data set's outputs match (floats
// within rtol 1e-3 / atol 1e-5, bfloat16 within one of its steps, NaN equal
// to NaN; integers and bools exactly; shapes and dtypes exactly), and is
// refused when the importer throws tandem::Error at import (an op,
// attribute or dtype Tandem cannot express) or when the case's data cannot
// be fed to its model (a dtype Tandem has no tensors of; a shape that
// contradicts the model's declaration). Anything else fails the test: a wrong answer, an error when
// the imported model runs, a crash.
//
// A case whose import needs some inputs as values (a Reshape's shape given
// as an input: ONNX's node tests make every operand an input) is imported
// again with those bound to each data set's values
// (OnnxImportOptions::known_inputs) and passes as "pass-bound".
//
// tests/data/onnx/expectations.txt lists each case as it stands ("pass",
// "pass-bound" or "refused"). A case listed as passing that no longer passes fails the
// test; a refused case that now passes is reported, so the file can be
// updated: TANDEM_WRITE_ONNX_EXPECTATIONS=1 rewrites it from this run.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/known_ops.h"
#include "serialization/file_io.h"
#include "serialization/onnx_file.h"
#include "serialization/onnx_import.h"

#include "onnx/onnx_pb.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

const fs::path kTestData = TANDEM_ONNX_TESTDATA_DIR;
const fs::path kExpectations = fs::path(TANDEM_TEST_DATA_DIR) / "onnx" / "expectations.txt";

enum class Outcome { kPass, kPassBound, kRefused, kWrong, kError };

struct Result {
  Outcome outcome;
  std::string detail;          // The refusal or the failure.
  int compared = 0;            // Output tensors compared with the expected ones.
  bool round_tripped = false;  // Exported as ONNX again, re-imported, and right again.
};

// A data set's tensor, for a model that declares its element type as
// `declared` (0: not declared). ONNX's test data written before NumPy had
// bfloat16 holds bfloat16 values as UINT16 tensors of the same bits: those
// are read as the bfloat16 the model declares.
Tensor read_tensor(const fs::path& path, int32_t declared) {
  const std::vector<uint8_t> bytes = serialization::read_file(path.string(), 1 << 30);
  onnx::TensorProto proto;
  TANDEM_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), path.string(),
               " is not a TensorProto");
  if (declared == onnx::TensorProto::BFLOAT16 && proto.data_type() == onnx::TensorProto::UINT16) {
    proto.set_data_type(onnx::TensorProto::BFLOAT16);
  }
  return serialization::tensor_from_onnx(proto, {path.parent_path().string(), path.string()},
                                         path.filename().string());
}

// Why `got` differs from `want`, or "" when it matches.
std::string difference(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype()) {
    return str_cat("dtype ", dtype_name(got.dtype()), ", expected ", dtype_name(want.dtype()));
  }
  if (got.shape() != want.shape()) {
    return str_cat("shape ", got.shape().to_string(), ", expected ", want.shape().to_string());
  }
  const bool floating = is_floating_point(want.dtype());
  const DType as = floating ? DType::kFloat64 : DType::kInt64;
  auto values = [&](const Tensor& t) {
    std::vector<double> v;
    if (t.numel() == 0) return v;
    const Tensor c = kernels::call1(kernels::cast_op(), {t}, {{"dtype", as}}, {});
    if (floating) return c.to_vector<double>();
    for (int64_t x : c.to_vector<int64_t>()) v.push_back(static_cast<double>(x));
    return v;
  };
  // bfloat16's step (2^-8 to 2^-7 relative) is coarser than rtol: a
  // bfloat16 result matches within one step, the most by which two roundings
  // of the same value differ (ONNX's data truncates, Tandem rounds to
  // nearest).
  const double rtol = want.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-3;
  const std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    const bool ok = floating
                        ? (g[i] == w[i] || std::abs(g[i] - w[i]) <= 1e-5 + rtol * std::abs(w[i]))
                        : g[i] == w[i];
    if (!ok) return str_cat("element ", i, " is ", g[i], ", expected ", w[i]);
  }
  return "";
}

// Why `model`'s answers for one data set are not `expected` (with the kind
// of failure), or "" when they are.
std::string check_outputs(const LoadedModel& model, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& expected, Outcome& failure) {
  std::vector<Tensor> outputs;
  try {
    outputs = model.run(inputs);
    for (const Tensor& t : outputs) t.wait_to_read();
  } catch (const Error& e) {
    failure = Outcome::kError;
    return e.message();
  }
  failure = Outcome::kWrong;
  if (outputs.size() != expected.size()) {
    return str_cat(outputs.size(), " outputs, expected ", expected.size());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string why = difference(outputs[i], expected[i]);
    if (!why.empty()) return str_cat("output ", i, ": ", why);
  }
  return "";
}

// The model's data inputs (not initializers), in order: the order of a
// data set's input_<k>.pb files; and the element types the model declares
// for them and for its outputs.
struct Signature {
  std::vector<std::string> inputs;
  std::vector<int32_t> input_types, output_types;
  // The inputs' shapes, -1 where a dimension is free.
  std::vector<std::vector<int64_t>> input_shapes;
};

Signature signature_of(const fs::path& model_path) {
  const std::vector<uint8_t> bytes = serialization::read_file(model_path.string(), 1 << 30);
  const onnx::ModelProto model = serialization::parse_onnx_model(bytes, model_path.string());
  std::set<std::string> initialized;
  for (const onnx::TensorProto& t : model.graph().initializer()) initialized.insert(t.name());
  Signature signature;
  for (const onnx::ValueInfoProto& input : model.graph().input()) {
    if (initialized.contains(input.name())) continue;
    signature.inputs.push_back(input.name());
    signature.input_types.push_back(input.type().tensor_type().elem_type());
    std::vector<int64_t> dims;
    for (const onnx::TensorShapeProto::Dimension& d : input.type().tensor_type().shape().dim()) {
      dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    signature.input_shapes.push_back(dims);
  }
  for (const onnx::ValueInfoProto& output : model.graph().output()) {
    signature.output_types.push_back(output.type().tensor_type().elem_type());
  }
  return signature;
}

// Why data set input i contradicts the shape the model declares for it
// (ONNX ships a few such cases), or "".
std::string contradiction(const Signature& signature, size_t i, const Tensor& value) {
  if (i >= signature.input_shapes.size()) return "";
  const std::vector<int64_t>& dims = signature.input_shapes[i];
  bool agrees = static_cast<int>(dims.size()) == value.shape().rank();
  for (size_t d = 0; agrees && d < dims.size(); ++d) {
    agrees = dims[d] < 0 || dims[d] == value.shape()[static_cast<int>(d)];
  }
  if (agrees) return "";
  std::string declared;
  for (int64_t d : dims)
    declared += str_cat(declared.empty() ? "" : ", ", d < 0 ? "?" : str_cat(d));
  return str_cat("input '", signature.inputs[i], "' has shape ", value.shape().to_string(),
                 " in the data set, but the model declares [", declared, "]");
}

// The declared type of element i of `types`, or 0.
int32_t declared(const std::vector<int32_t>& types, size_t i) {
  return i < types.size() ? types[i] : 0;
}

// The inputs a refused import says it needs as values (onnx_import.cc), or
// none.
std::set<std::string> inputs_needed_as_values(const std::string& message) {
  const std::string marker = "inputs the import needs as values:";
  std::set<std::string> names;
  size_t at = message.find(marker);
  if (at == std::string::npos) return names;
  const size_t end = message.find('(', at);
  for (at = message.find('\'', at); at < end; at = message.find('\'', at)) {
    const size_t close = message.find('\'', at + 1);
    names.insert(message.substr(at + 1, close - at - 1));
    at = close + 1;
  }
  return names;
}

// The values of the `bound` inputs in the case's first data set, or nothing
// when it has none.
std::optional<std::map<std::string, Tensor>> first_set_values(const fs::path& dir,
                                                              const std::set<std::string>& bound,
                                                              const Signature& signature) {
  const std::vector<std::string>& names = signature.inputs;
  std::map<std::string, Tensor> values;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!bound.contains(names[i])) continue;
    const fs::path file = dir / "test_data_set_0" / str_cat("input_", i, ".pb");
    if (!fs::exists(file)) return std::nullopt;
    values[names[i]] = read_tensor(file, declared(signature.input_types, i));
  }
  return values;
}

// A case imported as it is, or, when an op needs some of its inputs as
// values (a Reshape's shape given as an input), with those bound at import
// to each data set's values (OnnxImportOptions::known_inputs): "pass" or
// "pass-bound".
// Cases whose expected outputs contradict their own model, checked with
// ONNX's reference implementation (onnx.reference): counted as refused,
// with the reason.
const std::map<std::string, std::string>& contradicted_cases() {
  static const auto* cases = new std::map<std::string, std::string>{
      {"test_adam_multiple",
       "the expected outputs were computed with epsilon 1e-2, but the model leaves epsilon at "
       "its default, 1e-6 (ONNX's reference implementation gives Tandem's answer)"},
  };
  return *cases;
}

Result run_case(const fs::path& dir) {
  const fs::path model_path = dir / "model.onnx";
  if (auto bad = contradicted_cases().find(dir.filename().string());
      bad != contradicted_cases().end()) {
    return {Outcome::kRefused, str_cat("test data: ", bad->second)};
  }
  // An import stops at a node's first missing value: bind what it names,
  // then try again (with zeros: only which inputs are needed matters here).
  const Signature signature = signature_of(model_path);
  const std::vector<std::string>& names = signature.inputs;
  std::set<std::string> bound;
  for (size_t attempt = 0; attempt <= names.size(); ++attempt) {
    OnnxImportOptions probe;
    try {
      const std::optional<std::map<std::string, Tensor>> values =
          first_set_values(dir, bound, signature);
      if (!values) break;
      probe.known_inputs = *values;
      import_onnx(model_path.string(), probe);
      break;
    } catch (const Error& e) {
      std::set<std::string> needed = inputs_needed_as_values(e.message());
      const size_t before = bound.size();
      bound.insert(needed.begin(), needed.end());
      if (bound.size() == before) return {Outcome::kRefused, e.message()};
    }
  }
  std::vector<fs::path> sets;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().starts_with("test_data_set_")) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  int compared = 0;
  bool round_tripped = true;
  for (const fs::path& set : sets) {
    std::vector<Tensor> inputs, expected;
    OnnxImportOptions options;
    try {
      for (size_t i = 0; fs::exists(set / str_cat("input_", i, ".pb")); ++i) {
        const Tensor t =
            read_tensor(set / str_cat("input_", i, ".pb"), declared(signature.input_types, i));
        if (std::string why = contradiction(signature, i, t); !why.empty()) {
          return {Outcome::kRefused, str_cat("test data: ", why)};
        }
        if (i < names.size() && bound.contains(names[i])) {
          options.known_inputs[names[i]] = t;
        } else {
          inputs.push_back(t);
        }
      }
      for (size_t i = 0; fs::exists(set / str_cat("output_", i, ".pb")); ++i) {
        expected.push_back(
            read_tensor(set / str_cat("output_", i, ".pb"), declared(signature.output_types, i)));
      }
    } catch (const Error& e) {
      // Data Tandem cannot hold (int8 tensors, sequences): the case's model
      // imported but cannot be fed; count it refused.
      return {Outcome::kRefused, str_cat("test data: ", e.message())};
    }
    LoadedModel model;
    try {
      model = import_onnx(model_path.string(), options);
    } catch (const Error& e) {
      return {Outcome::kRefused, e.message()};
    }
    Outcome failure;
    if (std::string why = check_outputs(model, inputs, expected, failure); !why.empty()) {
      return {failure, str_cat(set.filename().string(), ": ", why)};
    }
    compared += static_cast<int>(expected.size());
    // Export -> import -> the same answers: Tandem's ONNX writer on every
    // model the reader took. A graph it cannot write yet is an Error.
    const fs::path again = fs::temp_directory_path() / str_cat("tandem-onnx-rt-", ::getpid());
    try {
      model.export_onnx(again.string());
    } catch (const Error&) {
      round_tripped = false;
      continue;
    }
    LoadedModel reread;
    try {
      reread = import_onnx(again.string());
    } catch (const Error& e) {
      fs::remove(again);
      return {Outcome::kError, str_cat("exported as ONNX, then refused on import: ", e.message())};
    }
    fs::remove(again);
    if (std::string why = check_outputs(reread, inputs, expected, failure); !why.empty()) {
      return {failure, str_cat(set.filename().string(), ", exported as ONNX and imported: ", why)};
    }
  }
  return {bound.empty() ? Outcome::kPass : Outcome::kPassBound, "", compared, round_tripped};
}

std::map<std::string, std::string> read_expectations() {
  std::map<std::string, std::string> expected;
  std::ifstream in(kExpectations);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    expected[line.substr(0, space)] = line.substr(space + 1);  // "pass" or "refused <why>".
  }
  return expected;
}

// Runs every case of one suite and checks it against the expectations.
void check_suite(const std::string& suite, std::map<std::string, std::string>& written) {
  const fs::path root = kTestData / suite;
  ASSERT_TRUE(fs::is_directory(root))
      << root << " is missing: install Debian's libonnx-testdata (tools/tandem.sh deps)";
  std::vector<fs::path> cases;
  for (const fs::directory_entry& e : fs::directory_iterator(root)) {
    if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
  }
  std::sort(cases.begin(), cases.end());
  const std::map<std::string, std::string> expected = read_expectations();
  int passed = 0, passed_bound = 0, refused = 0, newly_passing = 0, compared = 0;
  int round_tripped = 0;
  for (const fs::path& dir : cases) {
    const std::string name = str_cat(suite, "/", dir.filename().string());
    const Result r = run_case(dir);
    switch (r.outcome) {
      case Outcome::kPass:
      case Outcome::kPassBound: {
        const std::string status = r.outcome == Outcome::kPass ? "pass" : "pass-bound";
        ++(r.outcome == Outcome::kPass ? passed : passed_bound);
        compared += r.compared;
        round_tripped += r.round_tripped;
        written[name] = status;
        auto it = expected.find(name);
        if (it == expected.end() || it->second != status) ++newly_passing;
        // A case that passed as it is must not need bound inputs now.
        EXPECT_TRUE(r.outcome == Outcome::kPass || it == expected.end() || it->second != "pass")
            << name << " passed with every input as data before, and needs bound inputs now";
        break;
      }
      case Outcome::kRefused: {
        ++refused;
        // The first problem, without the file's path.
        std::string reason = r.detail.substr(0, r.detail.find('\n', r.detail.find('\n') + 1));
        std::replace(reason.begin(), reason.end(), '\n', ' ');
        const std::string path = str_cat("'", (dir / "model.onnx").string(), "'");
        if (size_t at = reason.find(path); at != std::string::npos)
          reason.erase(at, path.size() + 1);
        written[name] = str_cat("refused ", reason);
        auto it = expected.find(name);
        EXPECT_TRUE(it == expected.end() || !it->second.starts_with("pass"))
            << name << " passed before and is refused now: " << r.detail;
        break;
      }
      case Outcome::kWrong:
        ADD_FAILURE() << name << ": wrong answer: " << r.detail;
        break;
      case Outcome::kError:
        ADD_FAILURE() << name << ": imported, then failed: " << r.detail;
        break;
    }
  }
  std::cout << "[ onnx     ] " << suite << ": " << passed + passed_bound << " of " << cases.size()
            << " cases pass (" << passed_bound << " with inputs bound at import; " << compared
            << " outputs compared; " << round_tripped
            << " exported as ONNX again and right once more), " << refused << " refused, "
            << cases.size() - static_cast<size_t>(passed + passed_bound + refused) << " failed; "
            << newly_passing << " pass that the expectations do not list as passing\n";
}

void write_expectations(const std::map<std::string, std::string>& results) {
  if (std::getenv("TANDEM_WRITE_ONNX_EXPECTATIONS") == nullptr) return;
  std::map<std::string, std::string> all = read_expectations();
  for (const auto& [name, status] : results) all[name] = status;
  std::ofstream out(kExpectations);
  out << "# ONNX backend test cases (libonnx-testdata) as the importer stands:\n"
      << "# tests/serialization/onnx_conformance_test.cc. Rewritten by running it with\n"
      << "# TANDEM_WRITE_ONNX_EXPECTATIONS=1.\n";
  for (const auto& [name, status] : all) out << name << " " << status << "\n";
}

class OnnxConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxConformance, EveryCasePassesOrIsRefused) {
  std::map<std::string, std::string> written;
  check_suite(GetParam(), written);
  write_expectations(written);
}

INSTANTIATE_TEST_SUITE_P(Suites, OnnxConformance,
                         ::testing::Values("node", "pytorch-converted", "pytorch-operator",
                                           "simple"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tandem
