// Bad graph files (docs/security.md): each gets a tandem::Error
// naming the file, the place and the problem; never a crash.
#include "serialization/graph_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "nlohmann/json.hpp"

#include "serialization/model.h"
#include "tandem/tandem.h"
#include "tests/serialization/test_util.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;
using testing::expect_error;
using testing::ScratchDir;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

absl::Span<const uint8_t> bytes_of(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// Exports reshape(relu(x @ w + b), [batch, 3, 2]) with weights drawn from `seed`
// as `path`.json and `path`.params.
void export_small_model(uint64_t seed, const std::string& path) {
  manual_seed(seed);
  Tensor w = randn({4, 6});
  Tensor b = randn({6});
  HybridFunction f([w, b](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{reshape(relu(add(matmul(in[0], w), b)), {in[0].shape()[0], 3, 2})};
  });
  {
    NoGradGuard no_grad;
    f({randn({2, 4})});
  }
  f.export_model(path, {{"w", w}, {"b", b}});
}

// The small model as m.json and its params file in a scratch folder; each
// test edits a copy of the JSON.
class BadGraphFile : public ::testing::Test {
 protected:
  void SetUp() override {
    export_small_model(3, dir_.file("m"));
    params_ = testing::params_path_of(dir_.file("m.json"));
    text_ = read_text(dir_.file("m.json"));
    json_ = Json::parse(text_);
  }

  // The index of the first node running `op`.
  size_t node_of(const std::string& op) const {
    for (size_t n = 0; n < json_["nodes"].size(); ++n) {
      if (json_["nodes"][n]["op"] == op) return n;
    }
    ADD_FAILURE() << "no " << op << " node in\n" << text_;
    return 0;
  }

  // Loads the graph file after `edit`, expecting an error with `parts`.
  void expect_bad(const std::function<void(Json&)>& edit, const std::vector<std::string>& parts) {
    Json edited = json_;
    edit(edited);
    write_text(dir_.file("m.json"), edited.dump(1));
    expect_error([&] { load(dir_.file("m.json")); }, parts);
  }
  void expect_bad_text(const std::string& text, const std::vector<std::string>& parts) {
    write_text(dir_.file("m.json"), text);
    expect_error([&] { load(dir_.file("m.json")); }, parts);
  }

  ScratchDir dir_;
  std::string params_;  // The params file m.json names.
  std::string text_;
  Json json_;
};

TEST_F(BadGraphFile, TheUneditedFileLoads) {
  LoadedModel model = load(dir_.file("m.json"));
  EXPECT_EQ(model.run({randn({5, 4})})[0].shape(), Shape({5, 3, 2}));
}

TEST_F(BadGraphFile, EveryTruncationIsAnError) {
  for (size_t length = 0; length + 1 < text_.size(); ++length) {
    // The last byte is a newline; any shorter prefix is not a whole object.
    std::string prefix = text_.substr(0, length);
    EXPECT_THROW(serialization::parse_graph_json(bytes_of(prefix), "m.json"), Error) << length;
  }
}

TEST_F(BadGraphFile, RandomByteEditsNeverCrash) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string edited = text_;
    for (int k = 0; k < 1 + trial % 4; ++k) {
      edited[rng() % edited.size()] = static_cast<char>(rng() % 256);
    }
    try {
      serialization::parse_graph_json(bytes_of(edited), "m.json");
    } catch (const Error&) {
    }
  }
}

TEST_F(BadGraphFile, MalformedJson) {
  expect_bad_text("hello", {"m.json", "malformed JSON at line 1, column 1"});
  expect_bad_text(text_ + "}", {"malformed JSON at line"});
  expect_bad_text("{\n  \"format\": \"tandem.graph\",\n  \"format\": \"x\"}",
                  {"duplicate key \"format\""});
  expect_bad_text(std::string(100000, '[') + std::string(100000, ']'),
                  {"nested deeper than 64 levels"});
  expect_bad_text("[]", {"m.json", "/: expected an object, got array"});
  expect_bad_text("{\"format\": 1e400}", {"malformed JSON", "number overflow"});
}

TEST_F(BadGraphFile, WrongFormatOrVersion) {
  expect_bad([](Json& j) { j["format"] = "onnx"; }, {"/format", "not a Tandem graph file"});
  expect_bad([](Json& j) { j["format_version"] = "2.0"; },
             {"/format_version",
              str_cat("2.0 is newer than this build's ", serialization::kGraphFormatMajor, ".",
                      serialization::kGraphFormatMinor),
              "update Tandem"});
  expect_bad([](Json& j) { j["format_version"] = "one"; }, {"expected \"major.minor\""});
  expect_bad([](Json& j) { j.erase("nodes"); }, {"missing required field \"nodes\""});
  expect_bad([](Json& j) { j["comment"] = "hi"; }, {"/: unknown field \"comment\""});
  // A newer minor version may add fields; this build ignores them.
  Json newer = json_;
  newer["format_version"] = "1.7";
  newer["comment"] = "hi";
  write_text(dir_.file("m.json"), newer.dump());
  EXPECT_NO_THROW(load(dir_.file("m.json")));
}

TEST_F(BadGraphFile, UnknownOpsAreAllNamedFirst) {
  expect_bad(
      [](Json& j) {
        j["ops"].push_back("no_such_op");
        j["ops"].push_back("other_op");
        j["nodes"] = "this is never read";
      },
      {"/ops", "lacks the ops \"no_such_op\", \"other_op\""});
  expect_bad([&](Json& j) { j["nodes"][node_of("reshape")]["op"] = "exp"; },
             {"op \"exp\"", "is not listed in /ops"});
}

TEST_F(BadGraphFile, BadAttributes) {
  const size_t r = node_of("reshape");
  const std::string at = "/nodes/" + std::to_string(r);
  expect_bad([&](Json& j) { j["nodes"][r]["attrs"].erase("shape"); },
             {at + "/attrs", "missing required attribute 'shape'"});
  expect_bad(
      [&](Json& j) {
        j["nodes"][r]["attrs"]["shape"] = {{"type", "int"}, {"value", 3}};
      },
      {at + "/attrs/shape/type", "attribute 'shape' is of type ints, the file says \"int\""});
  expect_bad(
      [&](Json& j) {
        j["nodes"][r]["attrs"]["shape"] = {{"type", "ints"}, {"value", "abc"}};
      },
      {at + "/attrs/shape/value", "expected an array, got string"});
  expect_bad(
      [&](Json& j) {
        j["nodes"][r]["attrs"]["shape"] = {{"type", "ints"}, {"value", {1.5}}};
      },
      {at + "/attrs/shape/value/0", "expected an integer, got 1.5"});
  expect_bad(
      [&](Json& j) {
        j["nodes"][r]["attrs"]["foo"] = {{"type", "int"}, {"value", 1}};
      },
      {"unknown attribute \"foo\""});
  // Well typed, but the op refuses it.
  expect_bad(
      [&](Json& j) {
        j["nodes"][r]["attrs"]["shape"] = {{"type", "ints"}, {"value", {-1, 5}}};
      },
      {at, "op reshape", "cannot reshape"});
}

// Verifies that a graph whose attributes wrap a shape (pads of INT64_MAX:
// 3 + INT64_MAX + INT64_MAX) is refused while parsing; it used to load, and
// running it corrupted the heap. The file is the fuzz corpus's regression
// seed, so the fuzzers replay it too.
TEST(CraftedGraphFile, WrappedPadShapeIsAnErrorNotAHeapOverflow) {
  const std::string path =
      std::string(TANDEM_TEST_DATA_DIR) + "/../fuzz/corpus/graph_json/regress_pad_int64_max.json";
  const std::string text = read_text(path);
  ASSERT_FALSE(text.empty()) << path;
  expect_error([&] { serialization::parse_graph_json(bytes_of(text), "crafted.json"); },
               {"crafted.json", "pad", "overflows"});
}

TEST_F(BadGraphFile, BadReferencesAndArity) {
  const size_t r = node_of("reshape");
  expect_bad([&](Json& j) { j["nodes"][r]["inputs"].push_back("w"); },
             {"op reshape takes 1 input, the node has 2"});
  expect_bad([&](Json& j) { j["nodes"][r]["inputs"][0] = "nope"; },
             {"reads value \"nope\", which no input or earlier node defines"});
  // A node reading a later node's output: a forward reference, or a cycle.
  expect_bad(
      [&](Json& j) {
        j["nodes"][0]["inputs"][0] = j["nodes"][j["nodes"].size() - 1]["outputs"][0]["name"];
      },
      {"/nodes/0/inputs/0", "forward reference or a cycle"});
  expect_bad([&](Json& j) { j["outputs"][0]["value"] = "nope"; },
             {"/outputs/0/value", "no value is called \"nope\""});
  expect_bad([&](Json& j) { j["outputs"] = Json::array(); }, {"the graph has no outputs"});
}

TEST_F(BadGraphFile, DuplicateNames) {
  expect_bad([&](Json& j) { j["nodes"][1]["name"] = j["nodes"][0]["name"]; },
             {"/nodes/1/name", "is already used at /nodes/0"});
  expect_bad([&](Json& j) { j["nodes"][0]["outputs"][0]["name"] = "w"; },
             {"value name \"w\" is already defined at /inputs/1"});
  expect_bad([&](Json& j) { j["inputs"][2]["name"] = "w"; },
             {"/inputs/2", "value name \"w\" is already defined at /inputs/1"});
}

TEST_F(BadGraphFile, BadNamesShapesAndDtypes) {
  expect_bad(
      [](Json& j) {
        j["inputs"][0]["shape"] = {-1, 4};
      },
      {"/inputs/0/shape/0", "integer -1 is out of range"});
  expect_bad(
      [](Json& j) {
        j["inputs"][0]["shape"] = {int64_t{1} << 62, int64_t{1} << 62};
      },
      {"/inputs/0/shape", "overflow"});
  expect_bad(
      [](Json& j) {
        j["inputs"][0]["shape"] = Json::array({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
      },
      {"/inputs/0/shape", "more than the limit of 32"});
  expect_bad([](Json& j) { j["inputs"][0]["dtype"] = "float128"; },
             {"/inputs/0/dtype", "unknown dtype \"float128\""});
  expect_bad([](Json& j) { j["inputs"][1]["name"] = "w\u0001"; },
             {"/inputs/1/name", "has a control character"});
  expect_bad([](Json& j) { std::swap(j["inputs"][0], j["inputs"][1]); },
             {"/inputs/1", "data inputs must come before parameters"});
  expect_bad([](Json& j) { j["inputs"][1]["dynamic_dims"] = {0}; },
             {"/inputs/1/dynamic_dims", "only a data input"});
}

TEST_F(BadGraphFile, DeclaredShapesMustEqualInference) {
  expect_bad(
      [](Json& j) {
        j["nodes"][0]["outputs"][0]["shape"] = {2, 7};
      },
      {"/nodes/0/outputs/0", "declares output 0 as float32[2, 7] but the op infers"});
  expect_bad([](Json& j) { j["outputs"][0]["dtype"] = "float64"; },
             {"/outputs/0", "is declared float64[2, 3, 2]"});
  expect_bad(
      [](Json& j) {
        j["inputs"][0]["shape"] = {2, 5};
        j["inputs"][0]["dims"] = {"batch", 5};
      },
      {"/nodes/0", "op matmul"});
  expect_bad(
      [](Json& j) {
        j["inputs"][0]["shape"] = {2, 5};
      },
      {"/inputs/0/dims/1", "size 4 differs from the shape's 5"});
}

// Verifies that the free dimensions a file declares (format 1.2) are
// checked like everything else: names, expressions, the sizes they give at
// the traced shapes, and limits.
TEST_F(BadGraphFile, BadFreeDimensions) {
  // The unedited file: batch free, the reshape's first element follows it.
  ASSERT_EQ(json_["inputs"][0]["dims"], Json::array({"batch", 4}));
  const Json::json_pointer reshape_size("/nodes/3/attrs/shape/size");
  ASSERT_EQ(json_["nodes"][3]["op"], "reshape");
  ASSERT_EQ(json_[reshape_size], Json::array({"batch", 3, 2}));
  expect_bad([](Json& j) { j["inputs"][0]["dims"] = {"batch"}; },
             {"/inputs/0/dims", "has 1 sizes for a shape of rank 2"});
  expect_bad([](Json& j) { j["inputs"][0]["dims"][0] = "2batch"; },
             {"/inputs/0/dims/0", "not a valid dimension name"});
  expect_bad(
      [](Json& j) {
        j["inputs"][1]["dims"] = {"n", 6};
      },
      {"/inputs/1/dims", "only data inputs have free dimensions"});
  expect_bad([&](Json& j) { j[reshape_size][0] = "seq"; },
             {"/nodes/3/attrs/shape/size/0", "uses dimension \"seq\", which no data input names"});
  expect_bad(
      [&](Json& j) { j[reshape_size][0] = "2*batch"; },
      {"/nodes/3/attrs/shape/size/0", "is 4 at the traced sizes (batch = 2)", "the file says 2"});
  expect_bad([&](Json& j) { j[reshape_size][0] = "batch +"; },
             {"/nodes/3/attrs/shape/size/0", "bad size expression", "expected a number"});
  expect_bad([&](Json& j) { j[reshape_size][0] = "99999999999999999999*batch"; },
             {"/nodes/3/attrs/shape/size/0", "does not fit in int64"});
  expect_bad(
      [&](Json& j) {
        j[reshape_size][0] = "batch*batch*batch*batch*batch*batch*batch*batch*batch";
      },
      {"more than 8 names"});
  expect_bad([&](Json& j) { j[reshape_size][0] = std::string(2000, 'b'); },
             {"longer than the limit of 1024"});
  expect_bad([&](Json& j) { j[reshape_size][0] = 5; },
             {"/nodes/3/attrs/shape/size/0", "size 5 differs from the value's 2"});
  expect_bad([&](Json& j) { j[reshape_size] = {"batch"}; }, {"has 1 sizes for 3 values"});
  expect_bad([](Json& j) { j["nodes"][0]["outputs"][0]["dims"][0] = "batch*3"; },
             {"/nodes/0/outputs/0/dims/0", "is 6 at the traced sizes"});
  expect_bad([](Json& j) { j["nodes"][0]["outputs"][0]["dims"][0] = "7"; },
             {"/nodes/0/outputs/0/dims/0", "a fixed size is written as a number"});
  expect_bad([&](Json& j) { j[reshape_size] = "batch"; },
             {"/nodes/3/attrs/shape/size", "expected an array"});
  expect_bad(
      [](Json& j) {
        j["limits"] = {{{"size", "batch"}, {"at_most", 1}, {"node", "reshape_3"}}};
      },
      {"/limits/0", "the traced sizes (batch = 2) already break this limit"});
  expect_bad(
      [](Json& j) {
        j["limits"] = {{{"size", "batch"}, {"at_most", 9}, {"node", "nope"}}};
      },
      {"/limits/0/node", "no node is called \"nope\""});
}

// Verifies that a file of format 1.1, which marks the batch with
// "dynamic_dims": [0] and nothing else, still loads and follows the batch.
TEST_F(BadGraphFile, AVersion11DynamicBatchStillLoads) {
  Json j = json_;
  j["format_version"] = "1.1";
  j["inputs"][0].erase("dims");
  j["inputs"][0]["dynamic_dims"] = {0};
  for (Json& node : j["nodes"]) {
    for (Json& output : node["outputs"]) output.erase("dims");
    for (auto& [name, attr] : node["attrs"].items()) attr.erase("size");
  }
  // 1.1 exports rewrote the batch in a reshape to -1.
  j["nodes"][3]["attrs"]["shape"]["value"][0] = -1;
  write_text(dir_.file("m.json"), j.dump());
  LoadedModel model = load(dir_.file("m.json"));
  EXPECT_EQ(model.outputs()[0].shape_text(), "[batch, 3, 2]");
  EXPECT_EQ(model.run({randn({5, 4})})[0].shape(), Shape({5, 3, 2}));
}

TEST_F(BadGraphFile, ManifestMustMatchTheGraph) {
  expect_bad([](Json& j) { j["params"]["tensors"].erase(0); },
             {"/params/tensors", "no params entry for the graph input \"w\""});
  expect_bad(
      [](Json& j) {
        Json extra = j["params"]["tensors"][0];
        extra["name"] = "extra";
        j["params"]["tensors"].push_back(extra);
      },
      {"parameter \"extra\" is not an input of the graph"});
  expect_bad(
      [](Json& j) {
        j["params"]["tensors"][0]["shape"] = {6, 4};
      },
      {"/params/tensors/0", "float32[6, 4] here but float32[4, 6] in /inputs"});
  expect_bad([](Json& j) { j["params"]["tensors"][0]["offset"] = -1; },
             {"/params/tensors/0/offset", "expected a non-negative integer"});
  expect_bad([](Json& j) { j["params"]["tensors"][0]["crc32"] = int64_t{1} << 33; },
             {"/params/tensors/0/crc32", "out of range"});
}

TEST_F(BadGraphFile, ParamsPathMustStayInTheModelFolder) {
  for (const std::string& path :
       std::vector<std::string>{"../m.params", "/etc/passwd", "sub/m.params", "..", ".", "C:x", "",
                                "a\\b", std::string("m\0x", 3), std::string(256, 'p')}) {
    expect_bad([&](Json& j) { j["params"]["file"] = path; },
               {"/params/file", "must be a plain file name in the graph file's folder"});
  }
  expect_bad([&](Json& j) { j["params"]["file"] = std::string(256, 'p'); },
             {"256 bytes long, more than the 255 a file name may have"});
  write_text(dir_.file("m.json"), text_);
  std::filesystem::create_directories(dir_.file("elsewhere"));
  std::filesystem::rename(params_, dir_.file("elsewhere/m.params"));
  std::filesystem::create_symlink(dir_.file("elsewhere/m.params"), params_);
  expect_error([&] { load(dir_.file("m.json")); }, {params_, "symbolic link"});
}

TEST_F(BadGraphFile, ParamsFileMustMatchItsManifest) {
  // The params of another export, with other weights: caught before use.
  export_small_model(4, dir_.file("other"));
  const std::string other = testing::params_path_of(dir_.file("other.json"));
  std::filesystem::copy_file(other, params_, std::filesystem::copy_options::overwrite_existing);
  expect_error([&] { load(dir_.file("m.json")); }, {"not from the same export"});
  // Same names, another shape: the manifest names both.
  serialization::write_params(params_, {{"w", randn({6, 4})}, {"b", randn({6})}});
  expect_error([&] { load(dir_.file("m.json")); },
               {"disagree on tensor 0", "'w' float32[4, 6]", "'w' float32[6, 4]"});
  // Truncated: the params file's own checks name it.
  const std::string whole = read_text(other);
  write_text(params_, whole.substr(0, whole.size() - 10));
  expect_error([&] { load(dir_.file("m.json")); }, {params_, "truncated"});
  std::filesystem::remove(params_);
  expect_error([&] { load(dir_.file("m.json")); }, {"cannot open", params_});
}

TEST_F(BadGraphFile, AFailedLoadLeavesOtherModelsWorking) {
  LoadedModel good = load(dir_.file("m.json"));
  expect_bad([](Json& j) { j["format"] = "x"; }, {"not a Tandem graph file"});
  EXPECT_EQ(good.run({randn({1, 4})})[0].shape(), Shape({1, 3, 2}));
}

// A fused_elementwise program as long as a hostile file may make it (its
// parse is linear: kernels/fused_program.cc) still loads and computes what
// it says: r0 = -x, then r_k = r_{k-1} + x, so the last of n registers is
// (n - 2) * x.
TEST(LongFusedProgram, LoadsAndRuns) {
  constexpr int kInstructions = 40000;
  std::string program = "r0=neg(i0)";
  for (int k = 1; k < kInstructions; ++k) program += str_cat(";r", k, "=add(r", k - 1, ",i0)");
  ScratchDir dir;
  serialization::write_params(dir.file("long.params"), {});
  Json graph = {
      {"format", "tandem.graph"},
      {"format_version", "1.0"},
      {"producer", "test"},
      {"ops", {"fused_elementwise"}},
      {"inputs", {{{"name", "x"}, {"role", "data"}, {"dtype", "float32"}, {"shape", {3}}}}},
      {"nodes",
       {{{"name", "f"},
         {"op", "fused_elementwise"},
         {"attrs", {{"program", {{"type", "string"}, {"value", program}}}}},
         {"inputs", {"x"}},
         {"outputs", {{{"name", "y"}, {"dtype", "float32"}, {"shape", {3}}}}}}}},
      {"outputs", {{{"name", "out"}, {"value", "y"}, {"dtype", "float32"}, {"shape", {3}}}}},
      {"params", {{"file", "long.params"}, {"tensors", Json::array()}}}};
  write_text(dir.file("long.json"), graph.dump());
  LoadedModel model = load(dir.file("long.json"));
  Tensor x = Tensor::from_vector<float>({1, -2, 0.5}, Shape{3});
  const float n = kInstructions - 2;
  EXPECT_EQ(model.run({x})[0].to_vector<float>(), (std::vector<float>{n, -2 * n, 0.5f * n}));
}

}  // namespace
}  // namespace tandem
