// One place per op: outside the tests, an op's name is written as a string
// literal only where the op is defined and in its eager wrapper
// (eager/ops.h, eager/ops.cc; the collectives' in distributed/collectives.cc). Code that needs a
// particular op elsewhere reads a trait of its OpDef, holds a handle (kernels/known_ops.h) or the
// op's struct (kernels/elementwise_ops.h), so that renaming or removing an op
// breaks the build rather than a string compared somewhere.
//
// A registry walk gives the names and, per op, the files that define it
// (OpDef::defined_in: where it was added and where its CUDA kernel was set;
// for the ops of kernels/elementwise_ops.h, that list too). The sources of
// every module are scanned for string literals, comments skipped.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

namespace fs = std::filesystem;

// The string literals of C++ source `text`, each with its line, comments
// skipped.
struct Literal {
  std::string text;
  int line;
};

std::vector<Literal> string_literals(const std::string& text) {
  std::vector<Literal> literals;
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (text.compare(i, 2, "//") == 0) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (text.compare(i, 2, "/*") == 0) {
      for (i += 2; i + 1 < text.size() && text.compare(i, 2, "*/") != 0; ++i)
        line += text[i] == '\n';
      ++i;
    } else if (c == '\'') {  // A character literal ('"' is not a string); skip it.
      for (++i; i < text.size() && text[i] != '\''; ++i) i += text[i] == '\\';
    } else if (c == '"') {
      std::string literal;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') literal += text[i++];
        literal += text[i];
      }
      literals.push_back({literal, line});
    }
  }
  return literals;
}

// Words that are op names but, in these files, mean something else.
const std::map<std::string, std::set<std::string>> kNotOpNames = {
    // Tensor::reshape and Tensor::slice are these views' own entry points;
    // core cannot see the registry, and the name labels the call for errors.
    {"core/tensor.cc", {"reshape", "slice"}},
    // Values of the losses' "reduction" attribute.
    {"kernels/ops/softmax_loss.cc", {"mean", "sum"}},
    {"kernels/cuda/softmax_loss.cu", {"mean", "sum"}},
    // Values of the collectives' "reduction" attribute.
    {"kernels/ops/collective.cc", {"sum", "mean", "max", "min"}},
    // batch_norm's inputs, named in its errors.
    {"kernels/ops/norm.cc", {"mean", "var"}},
    // A value of interpolate's "mode" attribute.
    {"kernels/ops/interpolate.cc", {"linear"}},
    // Tandem's attribute names (clip's "min" and "max") and ONNX's names and
    // values: Split's "split", the "add", "mul" and "sum"/"mean" reductions,
    // Resize's "linear" mode and "floor"/"ceil" nearest modes, LSTM's "clip",
    // the "broadcast" attribute of binary ops before opset 7.
    {"serialization/onnx_ops.cc",
     {"min", "max", "split", "add", "mul", "sum", "mean", "linear", "floor", "ceil", "clip",
      "broadcast"}},
    // SplitToSequence's "split" input.
    {"serialization/onnx_sequence_ops.cc", {"split"}},
    // clip's attribute names, and GridSample's "zeros" padding mode.
    {"serialization/onnx_grid_sample.cc", {"min", "max", "zeros"}},
    {"serialization/onnx_quantized_ops.cc", {"min", "max"}},
    // clip's attribute names, read to write ONNX's Clip, and ONNX's "add"
    // reduction of ScatterND and ScatterElements.
    {"serialization/onnx_export.cc", {"min", "max", "add"}},
    // torch's names of a transformer layer's child module and activations.
    {"eager/nn/transformer.cc", {"dropout", "gelu", "relu"}},
};

// Whether `file` (relative to the source root) defines `op`.
bool defines(const OpDef& op, const std::string& file) {
  if (op.elementwise != nullptr && file == "kernels/elementwise_ops.h") return true;
  for (const std::string& path : op.defined_in) {
    if (path == file || path.ends_with("/" + file)) return true;
  }
  return false;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Verifies the scanner on the cases it must get right.
TEST(OpNameLiteralsTest, ScannerSkipsCommentsAndCharacters) {
  const std::vector<Literal> found =
      string_literals("a('\"'); // \"relu\"\n/* \"exp\"\n */ f(\"mul\", \"a\\\"b\");");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].text, "mul");
  EXPECT_EQ(found[0].line, 3);
  EXPECT_EQ(found[1].text, "a\\\"b");
}

TEST(OpNameLiteralsTest, OnlyDefinitionsAndEagerWrappersNameOps) {
  std::map<std::string, const OpDef*> ops;
  for (const OpDef* def : Registry::global().all()) ops[def->name] = def;
  ASSERT_GT(ops.size(), 50u);

  const fs::path root = TANDEM_SOURCE_DIR;
  const std::set<std::string> wrappers = {"eager/ops.h", "eager/ops.cc",
                                          "distributed/collectives.cc"};
  std::map<std::string, std::vector<std::string>> misplaced;  // File -> "line: name".
  // The attribute names of the ops each file defines (clip's "min" and
  // "max") are not op names there.
  auto names_an_attribute = [&](const std::string& word, const std::string& file) {
    for (const auto& [name, op] : ops) {
      if (defines(*op, file) && has_attr(*op, word)) return true;
    }
    return false;
  };
  int files = 0;
  for (const char* module :
       {"core", "kernels", "trace", "serialization", "eager", "distributed", "tools"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / module)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
      const std::string file = fs::relative(entry.path(), root).string();
      if (wrappers.contains(file)) continue;
#ifndef TANDEM_WITH_CUDA
      // Not compiled in this build, so the registry cannot say what they define.
      if (file.starts_with("kernels/cuda/")) continue;
#endif
      ++files;
      for (const Literal& literal : string_literals(read(entry.path()))) {
        auto op = ops.find(literal.text);
        if (op == ops.end() || defines(*op->second, file)) continue;
        auto other_meaning = kNotOpNames.find(file);
        if (other_meaning != kNotOpNames.end() && other_meaning->second.contains(literal.text)) {
          continue;
        }
        if (!names_an_attribute(literal.text, file)) {
          misplaced[file].push_back(str_cat(literal.line, ": \"", literal.text, "\""));
        }
      }
    }
  }
  EXPECT_GT(files, 100);
  for (const auto& [file, where] : misplaced) {
    ADD_FAILURE() << file << " names ops it does not define (" << where.size() << "):\n  "
                  << absl::StrJoin(where, "\n  ");
  }
}

}  // namespace
}  // namespace tandem::kernels
