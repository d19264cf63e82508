// ONNX models built message by message, for the importer's tests.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace tandem::testing {

// A float input whose dimensions are sizes or, as strings, free names (none:
// a scalar).
inline void add_input(onnx::GraphProto& g, const std::string& name, std::vector<std::string> dims) {
  onnx::ValueInfoProto* input = g.add_input();
  input->set_name(name);
  auto* type = input->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto_DataType_FLOAT);
  type->mutable_shape();
  for (const std::string& d : dims) {
    auto* dim = type->mutable_shape()->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0]))) {
      dim->set_dim_value(std::stoll(d));
    } else {
      dim->set_dim_param(d);
    }
  }
}

inline onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op,
                                 std::vector<std::string> inputs,
                                 std::vector<std::string> outputs) {
  onnx::NodeProto* node = g.add_node();
  node->set_op_type(op);
  node->set_name(outputs.at(0) + "_node");
  for (const std::string& i : inputs) node->add_input(i);
  for (const std::string& o : outputs) node->add_output(o);
  return node;
}

// Sets an attribute of `node`.
inline void set_attribute(onnx::NodeProto* node, const std::string& name, int64_t value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(value);
}
inline void set_attribute(onnx::NodeProto* node, const std::string& name,
                          const std::vector<int64_t>& values) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int64_t v : values) a->add_ints(v);
}
inline void set_attribute(onnx::NodeProto* node, const std::string& name, float value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(value);
}
inline void set_attribute(onnx::NodeProto* node, const std::string& name,
                          const std::string& value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_STRING);
  a->set_s(value);
}

inline onnx::ModelProto model_with_opset(int opset) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  m.mutable_graph()->set_name("test");
  return m;
}

inline std::vector<uint8_t> bytes_of(const onnx::ModelProto& m) {
  const std::string s = m.SerializeAsString();
  return {s.begin(), s.end()};
}

}  // namespace tandem::testing
