// ONNX's sequence ops through the importer (serialization/
// onnx_sequence_ops.cc): sequences built, edited and read at import, their
// elements computed as the model runs; and the refusals.
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "core/tensor.h"
#include "serialization/onnx_import.h"
#include "tests/serialization/onnx_model_builder.h"
#include "tests/serialization/test_util.h"

#include "onnx/onnx_pb.h"

namespace tandem {
namespace {

using testing::add_input;
using testing::add_node;
using testing::bytes_of;
using testing::set_attribute;

onnx::TensorProto ints(const std::string& name, std::vector<int64_t> values, bool scalar = false) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto_DataType_INT64);
  if (!scalar) t.add_dims(int64_t(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

TEST(OnnxSequenceTest, SplitEditAndJoin) {
  // x [2, 6] split along 1 into [2,1], [2,2], [2,3]; z inserted at 1; the
  // last erased: ([2,1], z [2,2], [2,2]); joined along 1, and stacked.
  onnx::ModelProto m = testing::model_with_opset(12);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"2", "6"});
  add_input(g, "z", {"2", "2"});
  *g.add_initializer() = ints("sizes", {1, 2, 3});
  *g.add_initializer() = ints("one", {1}, true);
  *g.add_initializer() = ints("last", {-1}, true);
  set_attribute(add_node(g, "SplitToSequence", {"x", "sizes"}, {"pieces"}), "axis", int64_t{1});
  add_node(g, "SequenceInsert", {"pieces", "z", "one"}, {"inserted"});
  add_node(g, "SequenceErase", {"inserted", "last"}, {"kept"});
  add_node(g, "SequenceLength", {"kept"}, {"count"});
  set_attribute(add_node(g, "ConcatFromSequence", {"kept"}, {"joined"}), "axis", int64_t{1});
  add_node(g, "SequenceAt", {"kept", "one"}, {"second"});
  add_node(g, "SequenceConstruct", {"second", "z"}, {"pair"});
  onnx::NodeProto* stacked = add_node(g, "ConcatFromSequence", {"pair"}, {"stacked"});
  set_attribute(stacked, "axis", int64_t{-1});
  set_attribute(stacked, "new_axis", int64_t{1});
  for (const char* out : {"count", "joined", "stacked"}) g.add_output()->set_name(out);
  const std::vector<float> x = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
  const std::vector<float> z = {-1, -2, -3, -4};
  const std::vector<Tensor> out = import_onnx(bytes_of(m), "sequences.onnx")
                                      .run({Tensor::from_vector<float>(x, Shape{2, 6}),
                                            Tensor::from_vector<float>(z, Shape{2, 2})});
  EXPECT_EQ(out[0].to_vector<int64_t>(), (std::vector<int64_t>{3}));
  ASSERT_EQ(out[1].shape(), (Shape{2, 5}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{0, -1, -2, 1, 2, 10, -3, -4, 11, 12}));
  ASSERT_EQ(out[2].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{-1, -1, -2, -2, -3, -3, -4, -4}));
}

TEST(OnnxSequenceTest, WhatASequenceCannotBeIsRefused) {
  onnx::ModelProto m = testing::model_with_opset(12);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"2", "6"});
  add_input(g, "at", {});
  g.mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto_DataType_INT64);
  add_node(g, "SequenceConstruct", {"x", "x"}, {"pair"});
  add_node(g, "SequenceAt", {"pair", "at"}, {"picked"});
  add_node(g, "Relu", {"pair"}, {"bad"});
  for (const char* out : {"pair", "picked", "bad"}) g.add_output()->set_name(out);
  testing::expect_error([&] { import_onnx(bytes_of(m), "sequences.onnx"); },
                        {"(SequenceAt, opset 12): position (input 1) must be known at import",
                         "(Relu, opset 12): a sequence where a tensor is needed",
                         "graph output 'pair': a sequence where a tensor is needed",
                         "inputs the import needs as values: 'at'"});
  // Stacking elements of different shapes (of different ranks here).
  onnx::ModelProto stack = testing::model_with_opset(12);
  onnx::GraphProto& sg = *stack.mutable_graph();
  add_input(sg, "x", {"2", "3", "4"});
  add_input(sg, "y", {"2", "4"});
  add_node(sg, "SequenceConstruct", {"x", "y"}, {"both"});
  onnx::NodeProto* join = add_node(sg, "ConcatFromSequence", {"both"}, {"joined"});
  set_attribute(join, "axis", int64_t{-1});
  set_attribute(join, "new_axis", int64_t{1});
  sg.add_output()->set_name("joined");
  testing::expect_error([&] { import_onnx(bytes_of(stack), "stack.onnx"); },
                        {"(ConcatFromSequence, opset 12): cannot stack [2, 3, 4] and [2, 4]"});
}

}  // namespace
}  // namespace tandem
