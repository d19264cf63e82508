// ONNX's DFT through the importer (serialization/onnx_signal_ops.cc)
// against the sum that defines it, computed here with std::complex: real and
// complex signals, along each axis, cut or zero-padded to dft_length,
// one-sided, and inverse.
#include <complex>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "core/tensor.h"
#include "serialization/onnx_import.h"
#include "tests/serialization/onnx_model_builder.h"

#include "onnx/onnx_pb.h"

namespace tandem {
namespace {

struct DftCase {
  int64_t batch, length, channels;  // x: [batch, length, channels] along axis 1.
  int64_t dft_length;               // 0: the signal's length.
  bool inverse, onesided;
};

TEST(OnnxSignalTest, DftMatchesItsDefinition) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (const DftCase& c : std::vector<DftCase>{{2, 8, 1, 0, false, false},
                                               {2, 7, 2, 0, false, false},
                                               {1, 7, 2, 0, true, false},
                                               {3, 6, 1, 9, false, false},
                                               {1, 9, 2, 5, true, false},
                                               {2, 10, 1, 0, false, true},
                                               {2, 9, 1, 12, false, true}}) {
    SCOPED_TRACE(str_cat("length ", c.length, ", channels ", c.channels, ", dft_length ",
                         c.dft_length, ", inverse ", c.inverse, ", onesided ", c.onesided));
    onnx::ModelProto m = testing::model_with_opset(17);
    onnx::GraphProto& g = *m.mutable_graph();
    testing::add_input(g, "x", {str_cat(c.batch), str_cat(c.length), str_cat(c.channels)});
    std::vector<std::string> inputs = {"x"};
    const int64_t n = c.dft_length > 0 ? c.dft_length : c.length;
    if (c.dft_length > 0) {
      onnx::TensorProto* len = g.add_initializer();
      len->set_name("n");
      len->set_data_type(onnx::TensorProto_DataType_INT64);
      len->add_int64_data(n);
      inputs.push_back("n");
    }
    onnx::NodeProto* node = testing::add_node(g, "DFT", inputs, {"y"});
    testing::set_attribute(node, "inverse", int64_t{c.inverse});
    testing::set_attribute(node, "onesided", int64_t{c.onesided});
    g.add_output()->set_name("y");
    std::vector<float> x(size_t(c.batch * c.length * c.channels));
    for (float& e : x) e = uniform(rng);
    const Tensor y = import_onnx(testing::bytes_of(m), "dft.onnx")
                         .run({Tensor::from_vector<float>(x, Shape{c.batch, c.length, c.channels})})
                         .at(0);
    const int64_t outputs = c.onesided ? n / 2 + 1 : n;
    ASSERT_EQ(y.shape(), (Shape{c.batch, outputs, 2}));
    const std::vector<float> got = y.to_vector<float>();
    const double sign = c.inverse ? 1 : -1, scale = c.inverse ? 1.0 / double(n) : 1;
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t k = 0; k < outputs; ++k) {
        std::complex<double> want = 0;
        for (int64_t t = 0; t < std::min(n, c.length); ++t) {
          const float* v = &x[size_t((b * c.length + t) * c.channels)];
          const std::complex<double> value(v[0], c.channels == 2 ? v[1] : 0.0);
          want += value * std::polar(1.0, sign * 2 * std::numbers::pi * double(t * k) / double(n));
        }
        want *= scale;
        const size_t at = size_t((b * outputs + k) * 2);
        EXPECT_NEAR(got[at], want.real(), 1e-5) << "batch " << b << ", bin " << k;
        EXPECT_NEAR(got[at + 1], want.imag(), 1e-5) << "batch " << b << ", bin " << k;
      }
    }
  }
}

}  // namespace
}  // namespace tandem
