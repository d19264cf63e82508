// tandem::import_onnx on models built here, protobuf message by message:
// free dimensions and folded shape subgraphs, every refusal of a file listed
// at once, and hostile files (serialization/onnx_import.h).
#include "serialization/onnx_import.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/serialization/onnx_model_builder.h"
#include "tests/serialization/test_util.h"

#include "onnx/onnx_pb.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::add_input;
using testing::add_node;
using testing::bytes_of;
using ::testing::HasSubstr;
using testing::model_with_opset;

onnx::TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims,
                               std::vector<float> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto_DataType_FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float v : values) t.add_float_data(v);
  return t;
}

onnx::TensorProto int_tensor(const std::string& name, std::vector<int64_t> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto_DataType_INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

// y = relu(x @ w + b), reshaped to [N, 2, 2] with a shape computed from x's
// own (Shape, Slice, Concat: folded at import, whatever N is).
onnx::ModelProto dense_model() {
  onnx::ModelProto m = model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"N", "3"});
  *g.add_initializer() = float_tensor("w", {3, 4}, {1, -1, 0.5, 2, 0, 1, -2, 1, 3, 0, 1, -1});
  *g.add_initializer() = float_tensor("b", {4}, {0.5, 0, -1, 1});
  *g.add_initializer() = int_tensor("begin", {0});
  *g.add_initializer() = int_tensor("end", {1});
  *g.add_initializer() = int_tensor("tail", {2, 2});
  add_node(g, "MatMul", {"x", "w"}, {"xw"});
  add_node(g, "Add", {"xw", "b"}, {"xwb"});
  add_node(g, "Relu", {"xwb"}, {"h"});
  add_node(g, "Shape", {"x"}, {"x_shape"});
  add_node(g, "Slice", {"x_shape", "begin", "end"}, {"batch"});
  add_node(g, "Concat", {"batch", "tail"}, {"target"})->add_attribute()->set_name("axis");
  add_node(g, "Reshape", {"h", "target"}, {"y"});
  g.add_output()->set_name("y");
  return m;
}

std::vector<float> dense_reference(const std::vector<float>& x, int64_t n) {
  const float w[3][4] = {{1, -1, 0.5, 2}, {0, 1, -2, 1}, {3, 0, 1, -1}};
  const float b[4] = {0.5, 0, -1, 1};
  std::vector<float> y;
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < 4; ++c) {
      float s = b[c];
      for (int k = 0; k < 3; ++k) s += x[static_cast<size_t>(r * 3 + k)] * w[k][c];
      y.push_back(std::max(s, 0.0f));
    }
  }
  return y;
}

TEST(OnnxImportTest, FreeDimensionAndFoldedShapeSubgraph) {
  onnx::ModelProto m = dense_model();
  // The Concat's axis attribute is an int.
  m.mutable_graph()->mutable_node(5)->mutable_attribute(0)->set_type(
      onnx::AttributeProto_AttributeType_INT);
  const std::vector<uint8_t> bytes = bytes_of(m);
  LoadedModel model = import_onnx(bytes, "dense.onnx");
  ASSERT_EQ(model.inputs().size(), 1u);
  EXPECT_EQ(model.inputs()[0].shape_text(), "[N, 3]");
  EXPECT_EQ(model.outputs()[0].shape_text(), "[N, 2, 2]");
  for (int64_t n : {1, 3, 7, 30}) {
    std::vector<float> x;
    for (int64_t i = 0; i < n * 3; ++i) x.push_back(std::sin(0.7f * static_cast<float>(i)));
    const Tensor y = model.run({Tensor::from_vector<float>(x, Shape{n, 3})}).at(0);
    EXPECT_EQ(y.shape(), (Shape{n, 2, 2}));
    const std::vector<float> want = dense_reference(x, n), got = y.to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "n " << n;
  }
}

TEST(OnnxImportTest, ConvertedModelLoadsAndAnswersTheSame) {
  onnx::ModelProto m = dense_model();
  m.mutable_graph()->mutable_node(5)->mutable_attribute(0)->set_type(
      onnx::AttributeProto_AttributeType_INT);
  const LoadedModel imported = import_onnx(bytes_of(m), "dense.onnx");
  const fs::path dir = fs::temp_directory_path() / "tandem_onnx_convert_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  imported.export_model((dir / "dense").string());
  const LoadedModel loaded = load((dir / "dense.json").string());
  const Tensor x =
      Tensor::from_vector<float>({1, 2, 3, -4, 5, -6, 0.5, 0, 2, 9, 9, 9, 1, 1, 1}, Shape{5, 3});
  const std::vector<float> a = imported.run({x}).at(0).to_vector<float>();
  const std::vector<float> b = loaded.run({x}).at(0).to_vector<float>();
  EXPECT_EQ(a, b);
  // The initializers are parameters under their ONNX names.
  EXPECT_THAT(loaded.file().params_file, HasSubstr("dense."));
  bool has_w = false;
  for (const auto& p : loaded.file().params) has_w = has_w || p.name == "w";
  EXPECT_TRUE(has_w);
  fs::remove_all(dir);
}

// Inputs x, float [2, 3], and shape, int64 [2] (for a Reshape).
void add_data_and_shape_inputs(onnx::GraphProto& g) {
  add_input(g, "x", {"2", "3"});
  add_input(g, "shape", {"2"});
  g.mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto_DataType_INT64);
}

TEST(OnnxImportTest, ListsEveryRefusedNodeAtOnce) {
  onnx::ModelProto m = model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_data_and_shape_inputs(g);
  add_node(g, "FancyOp", {"x"}, {"a"});
  add_node(g, "Relu", {"a"}, {"b"});  // Depends on a refused node: not listed again.
  add_node(g, "Reshape", {"x", "shape"}, {"c"});
  add_node(g, "Sin", {"x"}, {"d"})->set_domain("com.example");
  g.add_output()->set_name("b");
  g.add_output()->set_name("c");
  g.add_output()->set_name("d");
  testing::expect_error([&] { import_onnx(bytes_of(m), "bad.onnx"); },
                        {"ONNX file 'bad.onnx' (opset 13) cannot be imported: 3 problems",
                         "node 'a_node' (FancyOp, opset 13): Tandem has no conversion",
                         "node 'c_node' (Reshape, opset 13): shape (input 1) must be known at "
                         "import",
                         "node 'd_node' (Sin, opset 13): domain 'com.example'",
                         "inputs the import needs as values: 'shape'"});
}

TEST(OnnxImportTest, KnownInputsAreBoundAtImport) {
  onnx::ModelProto m = model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_data_and_shape_inputs(g);
  add_node(g, "Reshape", {"x", "shape"}, {"y"});
  g.add_output()->set_name("y");
  OnnxImportOptions options;
  options.known_inputs["shape"] = Tensor::from_vector<int64_t>({3, -1}, Shape{2});
  const LoadedModel model = import_onnx(bytes_of(m), "reshape.onnx", options);
  ASSERT_EQ(model.inputs().size(), 1u);  // `shape` is part of the model now.
  const Tensor y = model.run({Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3})}).at(0);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  options.known_inputs["nope"] = y;
  testing::expect_error([&] { import_onnx(bytes_of(m), "reshape.onnx", options); },
                        {"known_inputs names 'nope', which is not an input of the model"});
}

TEST(OnnxImportTest, AValueComputedFromInputsNamesThoseInputs) {
  // Reshape(x, Abs(shape)): the shape is computed from the input `shape`,
  // which the import names, and which, bound, makes the shape known.
  onnx::ModelProto m = model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_data_and_shape_inputs(g);
  add_node(g, "Abs", {"shape"}, {"positive"});
  add_node(g, "Reshape", {"x", "positive"}, {"y"});
  g.add_output()->set_name("y");
  testing::expect_error(
      [&] { import_onnx(bytes_of(m), "reshape.onnx"); },
      {"shape (input 1) must be known at import", "inputs the import needs as values: 'shape'"});
  OnnxImportOptions options;
  options.known_inputs["shape"] = Tensor::from_vector<int64_t>({-3, -2}, Shape{2});
  const LoadedModel model = import_onnx(bytes_of(m), "reshape.onnx", options);
  const Tensor y = model.run({Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3})}).at(0);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
}

TEST(OnnxImportTest, AnOpGivenNoInputsIsRefused) {
  // A Concat of nothing: the check comes before the op's inference reads
  // its first input.
  onnx::ModelProto m = model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"2"});
  testing::set_attribute(add_node(g, "Concat", {}, {"nothing"}), "axis", int64_t{0});
  g.add_output()->set_name("nothing");
  testing::expect_error([&] { import_onnx(bytes_of(m), "arity.onnx"); },
                        {"(Concat, opset 13): expects at least one input, got none"});
}

TEST(OnnxImportTest, SizesUsedAsTensorsAreRefusedWithFreeDimensions) {
  // z * float(shape(x)): the tensor [N, 3] is computed at import and would
  // be a constant of the graph, which cannot follow N.
  onnx::ModelProto m = model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"N", "3"});
  add_input(g, "z", {"2"});
  add_node(g, "Shape", {"x"}, {"s"});
  add_node(g, "Cast", {"s"}, {"sf"})->add_attribute()->set_name("to");
  auto* to = g.mutable_node(1)->mutable_attribute(0);
  to->set_type(onnx::AttributeProto_AttributeType_INT);
  to->set_i(onnx::TensorProto_DataType_FLOAT);
  add_node(g, "Mul", {"z", "sf"}, {"y"});
  g.add_output()->set_name("y");
  testing::expect_error([&] { import_onnx(bytes_of(m), "sizes.onnx"); },
                        {"import_onnx('sizes.onnx'): the tensor 'constant0' that node 'y_node' "
                         "(Mul, opset 13) reads is computed at import from the inputs' sizes and "
                         "holds other values at N = "});
  // With N fixed it is a constant like any other.
  g.mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(5);
  const LoadedModel model = import_onnx(bytes_of(m), "sizes.onnx");
  const Tensor y = model
                       .run({Tensor::from_vector<float>(
                                 {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, Shape{5, 3}),
                             Tensor::from_vector<float>({2, 10}, Shape{2})})
                       .at(0);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10, 30}));
}

TEST(OnnxImportTest, HostileFilesAreErrors) {
  const std::vector<uint8_t> garbage = {0xff, 0xff, 0xff, 0x01, 0x02, 0x12, 0x99};
  testing::expect_error([&] { import_onnx(garbage, "garbage.onnx"); },
                        {"'garbage.onnx' is not a valid ONNX model"});

  onnx::ModelProto old = dense_model();
  old.mutable_opset_import(0)->set_version(99);
  testing::expect_error([&] { import_onnx(bytes_of(old), "new.onnx"); },
                        {"opset 99 is outside the opsets Tandem reads (1 to 17)"});

  // External data must stay in the model's folder.
  const fs::path dir = fs::temp_directory_path() / "tandem_onnx_external_test";
  fs::remove_all(dir);
  fs::create_directories(dir / "model");
  { std::ofstream(dir / "secret") << std::string(48, 'x'); }
  for (const std::string& location :
       std::vector<std::string>{"../secret", (dir / "secret").string(), "missing.bin"}) {
    onnx::ModelProto m = dense_model();
    onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_float_data();
    w->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    auto* entry = w->add_external_data();
    entry->set_key("location");
    entry->set_value(location);
    const fs::path path = dir / "model" / "m.onnx";
    std::ofstream(path, std::ios::binary) << m.SerializeAsString();
    testing::expect_error([&] { import_onnx(path.string()); },
                          {"initializer 'w': external data '" + location + "'"});
  }
  // Data of the wrong size.
  onnx::ModelProto short_data = dense_model();
  short_data.mutable_graph()->mutable_initializer(0)->mutable_float_data()->RemoveLast();
  testing::expect_error([&] { import_onnx(bytes_of(short_data), "short.onnx"); },
                        {"initializer 'w': float_data holds 11 values, the shape [3, 4] needs 12"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
