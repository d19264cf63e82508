// ONNX's LSTM with peepholes through the importer (unrolled in
// serialization/onnx_ops.cc) against the gate equations of ONNX's LSTM
// written out here, in ONNX's weight layout (i, o, f, c blocks; P as i, o,
// f), both directions, with initial states.
#include <cmath>
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

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

TEST(OnnxPeepholeTest, BidirectionalLstmFollowsTheGateEquations) {
  const int64_t seq = 3, batch = 2, in = 4, hidden = 3, dirs = 2;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> uniform(-0.6f, 0.6f);
  auto random = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& e : v) e = uniform(rng);
    return v;
  };
  const std::vector<float> x = random(seq * batch * in), w = random(dirs * 4 * hidden * in),
                           r = random(dirs * 4 * hidden * hidden), b = random(dirs * 8 * hidden),
                           p = random(dirs * 3 * hidden), h0 = random(dirs * batch * hidden),
                           c0 = random(dirs * batch * hidden);
  onnx::ModelProto m = testing::model_with_opset(14);
  onnx::GraphProto& g = *m.mutable_graph();
  const std::vector<std::pair<std::string, std::vector<int64_t>>> inputs = {
      {"X", {seq, batch, in}},   {"W", {dirs, 4 * hidden, in}}, {"R", {dirs, 4 * hidden, hidden}},
      {"B", {dirs, 8 * hidden}}, {"h0", {dirs, batch, hidden}}, {"c0", {dirs, batch, hidden}},
      {"P", {dirs, 3 * hidden}}};
  for (const auto& [name, dims] : inputs) {
    std::vector<std::string> d;
    for (int64_t e : dims) d.push_back(str_cat(e));
    testing::add_input(g, name, d);
  }
  onnx::NodeProto* node =
      testing::add_node(g, "LSTM", {"X", "W", "R", "B", "", "h0", "c0", "P"}, {"Y", "Y_h", "Y_c"});
  testing::set_attribute(node, "hidden_size", hidden);
  testing::set_attribute(node, "direction", std::string("bidirectional"));
  for (const char* out : {"Y", "Y_h", "Y_c"}) g.add_output()->set_name(out);
  const std::vector<Tensor> out =
      import_onnx(testing::bytes_of(m), "lstm.onnx")
          .run({Tensor::from_vector<float>(x, Shape{seq, batch, in}),
                Tensor::from_vector<float>(w, Shape{dirs, 4 * hidden, in}),
                Tensor::from_vector<float>(r, Shape{dirs, 4 * hidden, hidden}),
                Tensor::from_vector<float>(b, Shape{dirs, 8 * hidden}),
                Tensor::from_vector<float>(h0, Shape{dirs, batch, hidden}),
                Tensor::from_vector<float>(c0, Shape{dirs, batch, hidden}),
                Tensor::from_vector<float>(p, Shape{dirs, 3 * hidden})});
  ASSERT_EQ(out[0].shape(), (Shape{seq, dirs, batch, hidden}));
  const std::vector<float> y = out[0].to_vector<float>(), yh = out[1].to_vector<float>(),
                           yc = out[2].to_vector<float>();
  for (int64_t d = 0; d < dirs; ++d) {
    for (int64_t n = 0; n < batch; ++n) {
      std::vector<double> h(static_cast<size_t>(hidden)), c(static_cast<size_t>(hidden));
      for (int64_t k = 0; k < hidden; ++k) {
        h[size_t(k)] = h0[size_t((d * batch + n) * hidden + k)];
        c[size_t(k)] = c0[size_t((d * batch + n) * hidden + k)];
      }
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t t = d == 0 ? s : seq - 1 - s;
        // Gate block q (0 i, 1 o, 2 f, 3 c), unit k.
        auto gate = [&](int64_t q, int64_t k) {
          const int64_t row = q * hidden + k;
          double v = b[size_t(d * 8 * hidden + row)] + b[size_t(d * 8 * hidden + 4 * hidden + row)];
          for (int64_t j = 0; j < in; ++j) {
            v += w[size_t((d * 4 * hidden + row) * in + j)] * x[size_t((t * batch + n) * in + j)];
          }
          for (int64_t j = 0; j < hidden; ++j) {
            v += r[size_t((d * 4 * hidden + row) * hidden + j)] * h[size_t(j)];
          }
          return v;
        };
        auto peep = [&](int64_t q, int64_t k) {
          return p[size_t(d * 3 * hidden + q * hidden + k)];
        };
        std::vector<double> h_new(static_cast<size_t>(hidden)), c_new(static_cast<size_t>(hidden));
        for (int64_t k = 0; k < hidden; ++k) {
          const double i = sigmoid(gate(0, k) + peep(0, k) * c[size_t(k)]);
          const double f = sigmoid(gate(2, k) + peep(2, k) * c[size_t(k)]);
          c_new[size_t(k)] = f * c[size_t(k)] + i * std::tanh(gate(3, k));
          const double o = sigmoid(gate(1, k) + peep(1, k) * c_new[size_t(k)]);
          h_new[size_t(k)] = o * std::tanh(c_new[size_t(k)]);
        }
        h = h_new;
        c = c_new;
        for (int64_t k = 0; k < hidden; ++k) {
          EXPECT_NEAR(y[size_t(((t * dirs + d) * batch + n) * hidden + k)], h[size_t(k)], 1e-5)
              << "direction " << d << ", step " << t << ", batch " << n;
        }
      }
      for (int64_t k = 0; k < hidden; ++k) {
        EXPECT_NEAR(yh[size_t((d * batch + n) * hidden + k)], h[size_t(k)], 1e-5);
        EXPECT_NEAR(yc[size_t((d * batch + n) * hidden + k)], c[size_t(k)], 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace tandem
