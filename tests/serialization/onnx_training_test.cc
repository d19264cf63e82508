// The optimizers of ai.onnx.preview.training through the importer
// (serialization/onnx_training_ops.cc), at the first step (T = 0) and a
// later one, against their update rules computed here in double precision;
// and the domain's opset rules.
#include <cmath>
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

constexpr char kTraining[] = "ai.onnx.preview.training";

onnx::ModelProto training_model(const std::string& op, const std::vector<std::string>& state) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  onnx::OperatorSetIdProto* set = m.add_opset_import();
  set->set_domain(kTraining);
  set->set_version(1);
  onnx::GraphProto& g = *m.mutable_graph();
  testing::add_input(g, "R", {});
  testing::add_input(g, "T", {});
  g.mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto_DataType_INT64);
  std::vector<std::string> inputs = {"R", "T", "X", "G"}, outputs = {"X_new"};
  testing::add_input(g, "X", {"3"});
  testing::add_input(g, "G", {"3"});
  for (const std::string& s : state) {
    testing::add_input(g, s, {"3"});
    inputs.push_back(s);
    outputs.push_back(s + "_new");
  }
  testing::add_node(g, op, inputs, outputs)->set_domain(kTraining);
  for (const std::string& o : outputs) g.add_output()->set_name(o);
  return m;
}

const std::vector<float> kX = {1, -2, 0.5f}, kG = {-1, 3, 0.25f}, kV = {2, 1, -1},
                         kH = {0.5f, 1, 10};

std::vector<Tensor> feed(int64_t step, bool with_h) {
  std::vector<Tensor> in = {
      Tensor::from_vector<float>({0.1f}, Shape{}), Tensor::from_vector<int64_t>({step}, Shape{}),
      Tensor::from_vector<float>(kX, Shape{3}), Tensor::from_vector<float>(kG, Shape{3}),
      Tensor::from_vector<float>(kV, Shape{3})};
  if (with_h) in.push_back(Tensor::from_vector<float>(kH, Shape{3}));
  return in;
}

TEST(OnnxTrainingTest, AdamFollowsItsUpdateRule) {
  onnx::ModelProto m = training_model("Adam", {"V", "H"});
  onnx::NodeProto* node = m.mutable_graph()->mutable_node(0);
  const double alpha = 0.95, beta = 0.85, eps = 1e-3, norm = 0.01, post = 0.1;
  testing::set_attribute(node, "alpha", float(alpha));
  testing::set_attribute(node, "beta", float(beta));
  testing::set_attribute(node, "epsilon", float(eps));
  testing::set_attribute(node, "norm_coefficient", float(norm));
  testing::set_attribute(node, "norm_coefficient_post", float(post));
  const LoadedModel model = import_onnx(testing::bytes_of(m), "adam.onnx");
  for (int64_t step : {0, 3}) {
    SCOPED_TRACE(str_cat("T = ", step));
    const std::vector<Tensor> out = model.run(feed(step, true));
    for (size_t i = 0; i < kX.size(); ++i) {
      const double g = norm * kX[i] + kG[i];
      const double v = alpha * kV[i] + (1 - alpha) * g;
      const double h = beta * kH[i] + (1 - beta) * g * g;
      double r = 0.1;
      if (step > 0) r *= std::sqrt(1 - std::pow(beta, step)) / (1 - std::pow(alpha, step));
      const double x = (1 - post) * (kX[i] - r * v / (std::sqrt(h) + eps));
      EXPECT_NEAR(out[0].to_vector<float>()[i], x, 1e-5);
      EXPECT_NEAR(out[1].to_vector<float>()[i], v, 1e-5);
      EXPECT_NEAR(out[2].to_vector<float>()[i], h, 1e-5);
    }
  }
}

TEST(OnnxTrainingTest, MomentumFollowsItsUpdateRule) {
  for (const std::string mode : {"standard", "nesterov"}) {
    onnx::ModelProto m = training_model("Momentum", {"V"});
    onnx::NodeProto* node = m.mutable_graph()->mutable_node(0);
    const double alpha = 0.9, beta = 0.5, norm = 0.01;
    testing::set_attribute(node, "alpha", float(alpha));
    testing::set_attribute(node, "beta", float(beta));
    testing::set_attribute(node, "norm_coefficient", float(norm));
    testing::set_attribute(node, "mode", mode);
    const LoadedModel model = import_onnx(testing::bytes_of(m), "momentum.onnx");
    for (int64_t step : {0, 4}) {
      SCOPED_TRACE(str_cat(mode, ", T = ", step));
      const std::vector<Tensor> out = model.run(feed(step, false));
      for (size_t i = 0; i < kX.size(); ++i) {
        const double g = norm * kX[i] + kG[i];
        const double v = alpha * kV[i] + (step > 0 ? beta : 1) * g;
        const double x = kX[i] - 0.1 * (mode == "standard" ? v : g + alpha * v);
        EXPECT_NEAR(out[0].to_vector<float>()[i], x, 1e-5);
        EXPECT_NEAR(out[1].to_vector<float>()[i], v, 1e-5);
      }
    }
  }
}

TEST(OnnxTrainingTest, OpsNeedTheirDomainsOpset) {
  // A standard op in a file that imports only the training domain.
  onnx::ModelProto m = training_model("Momentum", {"V"});
  testing::add_node(*m.mutable_graph(), "Relu", {"X"}, {"Y"});
  testing::expect_error([&] { import_onnx(testing::bytes_of(m), "mixed.onnx"); },
                        {"node 'Y_node' (Relu, opset 0): the file imports no opset of the "
                         "node's domain",
                         "(Momentum, training opset 1): alpha, beta, mode and norm_coefficient "
                         "are required"});
  m.mutable_opset_import(0)->set_version(2);
  testing::expect_error([&] { import_onnx(testing::bytes_of(m), "v2.onnx"); },
                        {"opset 2 of ai.onnx.preview.training is not the one Tandem reads (1)"});
}

}  // namespace
}  // namespace tandem
