// ONNX's If, Loop and Scan through the importer (serialization/
// onnx_control_flow.cc), unrolled at import: bodies that read the enclosing
// scope and shadow its names, a condition computed as the model runs,
// loop-carried state and scan outputs, reversed and re-axed scans, each
// against the same computation written out here; and the refusals.
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

void set_body(onnx::NodeProto* node, const std::string& name, const onnx::GraphProto& body) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_GRAPH);
  *a->mutable_g() = body;
}

void set_type(onnx::GraphProto& g, int input, int32_t type) {
  g.mutable_input(input)->mutable_type()->mutable_tensor_type()->set_elem_type(type);
}

onnx::TensorProto scalar_initializer(const std::string& name, int32_t type, double value) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  if (type == onnx::TensorProto_DataType_INT64) t.add_int64_data(int64_t(value));
  if (type == onnx::TensorProto_DataType_BOOL) t.add_int32_data(int32_t(value));
  if (type == onnx::TensorProto_DataType_FLOAT) t.add_float_data(float(value));
  return t;
}

// A Loop body's inputs: the iteration number, the condition, and one
// float state s of `size`.
onnx::GraphProto loop_body(const std::string& size) {
  onnx::GraphProto body;
  body.set_name("body");
  add_input(body, "i", {});
  set_type(body, 0, onnx::TensorProto_DataType_INT64);
  add_input(body, "cond", {});
  set_type(body, 1, onnx::TensorProto_DataType_BOOL);
  add_input(body, "s", {size});
  return body;
}

TEST(OnnxControlFlowTest, IfWithAConditionComputedAsTheModelRunsComputesBothBranches) {
  // y = x > 0 summed ? x + x : x * x, the branches reading x from outside;
  // the else branch names its result like the graph's own output.
  onnx::ModelProto m = testing::model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"2", "3"});
  add_node(g, "ReduceSum", {"x"}, {"total"});
  add_node(g, "Greater", {"total", "zero"}, {"positive"});
  *g.add_initializer() = scalar_initializer("zero", onnx::TensorProto_DataType_FLOAT, 0);
  onnx::GraphProto then, otherwise;
  then.set_name("then");
  add_node(then, "Add", {"x", "x"}, {"sum"});
  then.add_output()->set_name("sum");
  otherwise.set_name("else");
  add_node(otherwise, "Mul", {"x", "x"}, {"y"});
  otherwise.add_output()->set_name("y");
  onnx::NodeProto* branch = add_node(g, "If", {"positive"}, {"y"});
  set_body(branch, "then_branch", then);
  set_body(branch, "else_branch", otherwise);
  g.add_output()->set_name("y");
  const LoadedModel model = import_onnx(bytes_of(m), "if.onnx");
  for (const float sign : {1.0f, -1.0f}) {
    const std::vector<float> x = {sign * 1, 2, 3, sign * 4, 5, sign * 6};
    const std::vector<float> y =
        model.run({Tensor::from_vector<float>(x, Shape{2, 3})}).at(0).to_vector<float>();
    float total = 0;
    for (float v : x) total += v;
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], total > 0 ? x[i] + x[i] : x[i] * x[i]);
  }
}

TEST(OnnxControlFlowTest, LoopCarriesStateAndStacksScanOutputs) {
  // for i in 0..3: s = s + x * i; scan out s * 2.
  onnx::ModelProto m = testing::model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"3"});
  add_input(g, "s0", {"3"});
  *g.add_initializer() = scalar_initializer("trips", onnx::TensorProto_DataType_INT64, 4);
  *g.add_initializer() = scalar_initializer("go", onnx::TensorProto_DataType_BOOL, 1);
  onnx::GraphProto body = loop_body("3");
  add_node(body, "Identity", {"cond"}, {"cond_out"});
  add_node(body, "Cast", {"i"}, {"fi"});
  set_attribute(body.mutable_node(1), "to", int64_t{onnx::TensorProto_DataType_FLOAT});
  add_node(body, "Mul", {"x", "fi"}, {"step"});
  add_node(body, "Add", {"s", "step"}, {"s_out"});
  add_node(body, "Add", {"s_out", "s_out"}, {"twice"});
  for (const char* out : {"cond_out", "s_out", "twice"}) body.add_output()->set_name(out);
  set_body(add_node(g, "Loop", {"trips", "go", "s0"}, {"s_final", "trace"}), "body", body);
  g.add_output()->set_name("s_final");
  g.add_output()->set_name("trace");
  const std::vector<float> x = {1, -2, 0.5f}, s0 = {3, 0, 1};
  const std::vector<Tensor> out =
      import_onnx(bytes_of(m), "loop.onnx")
          .run({Tensor::from_vector<float>(x, Shape{3}), Tensor::from_vector<float>(s0, Shape{3})});
  ASSERT_EQ(out[1].shape(), (Shape{4, 3}));
  std::vector<float> s = s0, trace;
  for (int i = 0; i < 4; ++i) {
    for (size_t k = 0; k < 3; ++k) s[k] += x[k] * float(i);
    for (size_t k = 0; k < 3; ++k) trace.push_back(2 * s[k]);
  }
  EXPECT_EQ(out[0].to_vector<float>(), s);
  EXPECT_EQ(out[1].to_vector<float>(), trace);
}

TEST(OnnxControlFlowTest, ScanRunsReversedAlongAnAxisAndStacksOnAnother) {
  // Running sums of x [2, 4] along axis 1, from the end; outputs stacked
  // on axis 1: y[:, t] = sum of x[:, 3 - t ..].
  onnx::ModelProto m = testing::model_with_opset(11);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "init", {"2"});
  add_input(g, "x", {"2", "4"});
  onnx::GraphProto body;
  body.set_name("body");
  add_input(body, "acc", {"2"});
  add_input(body, "column", {"2"});
  add_node(body, "Add", {"acc", "column"}, {"acc_out"});
  add_node(body, "Identity", {"acc_out"}, {"seen"});
  body.add_output()->set_name("acc_out");
  body.add_output()->set_name("seen");
  onnx::NodeProto* scan = add_node(g, "Scan", {"init", "x"}, {"final", "sums"});
  set_body(scan, "body", body);
  set_attribute(scan, "num_scan_inputs", int64_t{1});
  set_attribute(scan, "scan_input_axes", std::vector<int64_t>{1});
  set_attribute(scan, "scan_input_directions", std::vector<int64_t>{1});
  set_attribute(scan, "scan_output_axes", std::vector<int64_t>{1});
  g.add_output()->set_name("final");
  g.add_output()->set_name("sums");
  const std::vector<float> x = {1, 2, 3, 4, 10, 20, 30, 40};
  const std::vector<Tensor> out = import_onnx(bytes_of(m), "scan.onnx")
                                      .run({Tensor::from_vector<float>({0.5f, -1}, Shape{2}),
                                            Tensor::from_vector<float>(x, Shape{2, 4})});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{10.5f, 99}));
  ASSERT_EQ(out[1].shape(), (Shape{2, 4}));
  EXPECT_EQ(out[1].to_vector<float>(),
            (std::vector<float>{4.5f, 7.5f, 9.5f, 10.5f, 39, 69, 89, 99}));
}

TEST(OnnxControlFlowTest, WhatCannotBeUnrolledIsRefused) {
  // A loop whose condition the body computes from data.
  onnx::ModelProto m = testing::model_with_opset(13);
  onnx::GraphProto& g = *m.mutable_graph();
  add_input(g, "x", {"1"});
  *g.add_initializer() = scalar_initializer("go", onnx::TensorProto_DataType_BOOL, 1);
  onnx::GraphProto body = loop_body("1");
  add_node(body, "Add", {"s", "s"}, {"s_out"});
  add_node(body, "ReduceSum", {"s_out"}, {"total"});
  add_node(body, "Less", {"total", "x"}, {"more"});
  body.add_output()->set_name("more");
  body.add_output()->set_name("s_out");
  set_body(add_node(g, "Loop", {"", "go", "x"}, {"y"}), "body", body);
  g.add_output()->set_name("y");
  testing::expect_error([&] { import_onnx(bytes_of(m), "while.onnx"); },
                        {"node 'y_node' (Loop, opset 13): the body computes its condition as the "
                         "model runs"});
  // A refusal inside a body names the node in the body.
  body.mutable_node(0)->set_op_type("FancyAdd");
  onnx::AttributeProto* attr = g.mutable_node(0)->mutable_attribute(0);
  *attr->mutable_g() = body;
  testing::expect_error([&] { import_onnx(bytes_of(m), "while.onnx"); },
                        {"(Loop, opset 13): in its body, node 's_out_node' (FancyAdd, opset 13): "
                         "Tandem has no conversion for this op type"});
}

}  // namespace
}  // namespace tandem
