// nn modules: parameter names and shapes, forward shapes and values against
// hand computations, train/eval behaviour, initializers, state dicts and
// checkpoint files.
#include "eager/nn/nn.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& entry : named) out.push_back(entry.first);
  return out;
}

std::vector<int64_t> dims_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

// Runs `f`, expecting a tandem::Error whose text contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::vector<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected a tandem::Error containing '" << parts[0] << "'";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed())))
      .string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected,
                 double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tolerance) << "at index " << i;
  }
}

// Verifies Linear's names, shapes, init range and forward against x W^T + b.
TEST(NnLinearTest, ParametersAndForward) {
  nn::Linear fc(4, 3);
  EXPECT_THAT(names_of(fc.named_parameters()), ElementsAre("weight", "bias"));
  EXPECT_THAT(dims_of(fc.weight()), ElementsAre(3, 4));
  EXPECT_THAT(dims_of(fc.bias()), ElementsAre(3));
  EXPECT_EQ(fc.num_parameters(), 15);
  EXPECT_TRUE(fc.weight().requires_grad());
  EXPECT_EQ(fc.weight().dtype(), DType::kFloat32);
  for (float w : fc.weight().to_vector<float>()) EXPECT_LE(std::abs(w), 0.5f);  // 1/sqrt(4)
  for (float b : fc.bias().to_vector<float>()) EXPECT_LE(std::abs(b), 0.5f);

  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, -1, 0, 0.5, 2}, {2, 4});
  Tensor y = fc.forward(x);
  EXPECT_THAT(dims_of(y), ElementsAre(2, 3));
  auto w = fc.weight().to_vector<float>(), b = fc.bias().to_vector<float>();
  auto xs = x.to_vector<float>();
  std::vector<double> expected;
  for (int n = 0; n < 2; ++n) {
    for (int o = 0; o < 3; ++o) {
      double s = b[o];
      for (int i = 0; i < 4; ++i) s += static_cast<double>(xs[n * 4 + i]) * w[o * 4 + i];
      expected.push_back(s);
    }
  }
  expect_near(y.to_vector<float>(), expected, 1e-5);
  expect_error(
      [&] {
        fc.forward(Tensor::from_vector<float>({1, 2, 3}, {1, 3}));
      },
      {"Linear(4 -> 3)", "[1, 3]"});
}

// Verifies that Linear without bias has only a weight and computes x W^T.
TEST(NnLinearTest, WithoutBias) {
  nn::Linear fc({.in_features = 2, .out_features = 1, .bias = false});
  EXPECT_THAT(names_of(fc.named_parameters()), ElementsAre("weight"));
  EXPECT_FALSE(fc.bias().defined());
  nn::init::constant_(fc.weight(), 2);
  Tensor y = fc.forward(Tensor::from_vector<float>({1, 3}, {1, 2}));
  EXPECT_THAT(y.to_vector<float>(), ElementsAre(8));
  EXPECT_EQ(fc.to_string(), "Linear(in_features=2, out_features=1, bias=false)");
}

// Verifies Conv2d's weight shape (with groups), init range and output sizes.
TEST(NnConvTest, ShapesAndOptions) {
  nn::Conv2d conv(3, 8, 3, /*stride=*/1, /*padding=*/1);
  EXPECT_THAT(names_of(conv.named_parameters()), ElementsAre("weight", "bias"));
  EXPECT_THAT(dims_of(conv.weight()), ElementsAre(8, 3, 3, 3));
  const double bound = 1 / std::sqrt(27.0);
  for (float w : conv.weight().to_vector<float>()) EXPECT_LE(std::abs(w), bound + 1e-7);
  Tensor x = randn({2, 3, 5, 5});
  EXPECT_THAT(dims_of(conv.forward(x)), ElementsAre(2, 8, 5, 5));

  nn::Conv2d strided({.in_channels = 4,
                      .out_channels = 6,
                      .kernel_size = {3, 1},
                      .stride = 2,
                      .groups = 2,
                      .bias = false});
  EXPECT_THAT(dims_of(strided.weight()), ElementsAre(6, 2, 3, 1));
  EXPECT_THAT(names_of(strided.named_parameters()), ElementsAre("weight"));
  EXPECT_THAT(dims_of(strided.forward(randn({1, 4, 7, 7}))), ElementsAre(1, 6, 3, 4));
  EXPECT_EQ(strided.to_string(),
            "Conv2d(4, 6, kernel_size=(3, 1), stride=2, groups=2, bias=false)");

  expect_error([] { nn::Conv2d(3, 8, 3, 1, 0, 1, /*groups=*/2); }, {"multiples of groups"});
  expect_error([&] { conv.forward(randn({2, 4, 5, 5})); }, {"[N, 3, H, W]", "[2, 4, 5, 5]"});
}

// Verifies that a 1x1 convolution with known weights computes the weighted
// channel sum plus bias at every pixel.
TEST(NnConvTest, ForwardValues) {
  nn::Conv2d conv(2, 1, 1);
  conv.weight().assign_(Tensor::from_vector<float>({2, -1}, {1, 2, 1, 1}));
  conv.bias().assign_(Tensor::from_vector<float>({0.5}, {1}));
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 10, 20, 30, 40}, {1, 2, 2, 2});
  EXPECT_THAT(conv.forward(x).to_vector<float>(), ElementsAre(-7.5, -15.5, -23.5, -31.5));
}

// Verifies shapes of the parameter-free layers.
TEST(NnLayersTest, PoolingFlattenActivationShapes) {
  Tensor x = randn({2, 3, 8, 6});
  EXPECT_THAT(dims_of(nn::MaxPool2d(2).forward(x)), ElementsAre(2, 3, 4, 3));
  EXPECT_THAT(dims_of(nn::MaxPool2d(3, 1).forward(x)), ElementsAre(2, 3, 6, 4));
  EXPECT_THAT(dims_of(nn::AvgPool2d(nn::Size2(2, 3)).forward(x)), ElementsAre(2, 3, 4, 2));
  EXPECT_THAT(dims_of(nn::AdaptiveAvgPool2d(1).forward(x)), ElementsAre(2, 3, 1, 1));
  EXPECT_THAT(dims_of(nn::Flatten().forward(x)), ElementsAre(2, 144));
  EXPECT_THAT(dims_of(nn::Flatten(0, 1).forward(x)), ElementsAre(6, 8, 6));
  EXPECT_THAT(dims_of(nn::ReLU().forward(x)), ElementsAre(2, 3, 8, 6));
  EXPECT_EQ(nn::MaxPool2d(2).to_string(), "MaxPool2d(kernel_size=2, stride=2)");
  EXPECT_EQ(nn::ReLU().parameters().size(), 0u);

  Tensor v = Tensor::from_vector<float>({-1, 0, 2}, {3});
  EXPECT_THAT(nn::ReLU().forward(v).to_vector<float>(), ElementsAre(0, 0, 2));
  expect_near(nn::GELU().forward(v).to_vector<float>(),
              {-1 * 0.5 * (1 + std::erf(-1 / std::sqrt(2.0))), 0,
               2 * 0.5 * (1 + std::erf(2 / std::sqrt(2.0)))},
              2e-3);
  expect_near(nn::Sigmoid().forward(v).to_vector<float>(),
              {1 / (1 + std::exp(1.0)), 0.5, 1 / (1 + std::exp(-2.0))}, 1e-6);
  expect_near(nn::Tanh().forward(v).to_vector<float>(), {std::tanh(-1.0), 0, std::tanh(2.0)}, 1e-6);
  expect_near(nn::LeakyReLU(0.1).forward(v).to_vector<float>(), {-0.1, 0, 2}, 1e-7);

  Tensor m =
      Tensor::from_vector<float>({1, 5, 2, 0, 3, 4, 8, 1, 0, 0, 7, 7, 2, 2, 1, 9}, {1, 1, 4, 4});
  EXPECT_THAT(nn::MaxPool2d(2).forward(m).to_vector<float>(), ElementsAre(5, 8, 2, 9));
  // Dilation 2 over the 4x4 plane: each window takes rows and columns two
  // apart, max(1, 2, 0, 7) = 7 at the top left.
  nn::MaxPool2d dilated(2, 1, 0, /*dilation=*/2);
  EXPECT_THAT(dilated.forward(m).to_vector<float>(), ElementsAre(7, 7, 8, 9));
  EXPECT_EQ(dilated.to_string(), "MaxPool2d(kernel_size=2, stride=1, dilation=2)");
  EXPECT_THAT(nn::AvgPool2d(2).forward(m).to_vector<float>(), ElementsAre(3.25, 2.75, 1, 6));
  expect_error([] { nn::MaxPool2d(2).forward(randn({3, 4})); }, {"[N, C, H, W]"});
}

// Verifies Embedding's parameter and that it picks rows of the weight.
TEST(NnLayersTest, Embedding) {
  nn::Embedding embed(5, 3);
  EXPECT_THAT(names_of(embed.named_parameters()), ElementsAre("weight"));
  EXPECT_THAT(dims_of(embed.weight()), ElementsAre(5, 3));
  Tensor idx = Tensor::from_vector<int64_t>({4, 0, 4, 1}, {2, 2});
  Tensor y = embed.forward(idx);
  EXPECT_THAT(dims_of(y), ElementsAre(2, 2, 3));
  auto w = embed.weight().to_vector<float>();
  auto out = y.to_vector<float>();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(out[k], w[4 * 3 + k]);
    EXPECT_EQ(out[3 + k], w[k]);
  }
  expect_error([&] { embed.forward(Tensor::from_vector<float>({1}, {1})); }, {"int64 indices"});
  // -1 is out of range, not the last row (it was read as take's "from the end").
  expect_error(
      [&] {
        embed.forward(Tensor::from_vector<int64_t>({0, -1}, {2})).to_vector<float>();
      },
      {"embedding: index -1 is out of range", "shape [5, 3]"});
}

// Verifies LayerNorm's parameters and its output against a hand computation.
TEST(NnNormTest, LayerNorm) {
  nn::LayerNorm ln({4});
  EXPECT_THAT(names_of(ln.named_parameters()), ElementsAre("weight", "bias"));
  EXPECT_THAT(ln.weight().to_vector<float>(), ElementsAre(1, 1, 1, 1));
  ln.weight().assign_(Tensor::from_vector<float>({1, 2, 1, 1}, {4}));
  ln.bias().assign_(Tensor::from_vector<float>({0, 0, 0, 1}, {4}));
  std::vector<float> xs = {1, 2, 3, 4, -2, 0, 2, 4};
  Tensor y = ln.forward(Tensor::from_vector<float>(xs, {2, 4}));
  std::vector<double> expected;
  const double w[] = {1, 2, 1, 1}, b[] = {0, 0, 0, 1};
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += xs[r * 4 + i] / 4.0;
    for (int i = 0; i < 4; ++i) var += (xs[r * 4 + i] - mean) * (xs[r * 4 + i] - mean) / 4.0;
    for (int i = 0; i < 4; ++i) {
      expected.push_back((xs[r * 4 + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i]);
    }
  }
  expect_near(y.to_vector<float>(), expected, 1e-5);
  expect_error([&] { ln.forward(randn({2, 3})); }, {"trailing dims are [4]", "[2, 3]"});
  EXPECT_THAT(dims_of(nn::LayerNorm({3, 2}).forward(randn({5, 3, 2}))), ElementsAre(5, 3, 2));
}

// Verifies BatchNorm2d in training against a hand computation: batch
// statistics normalize, and the running statistics move by momentum towards
// the batch mean and the unbiased batch variance. Then, in eval, that the
// running statistics normalize and stay unchanged.
TEST(NnNormTest, BatchNorm2dTrainAndEval) {
  nn::BatchNorm2d bn(2);
  EXPECT_THAT(names_of(bn.named_parameters()), ElementsAre("weight", "bias"));
  EXPECT_THAT(names_of(bn.named_buffers()), ElementsAre("running_mean", "running_var"));
  EXPECT_FALSE(bn.running_mean().requires_grad());
  bn.weight().assign_(Tensor::from_vector<float>({2, 1}, {2}));
  bn.bias().assign_(Tensor::from_vector<float>({0, 1}, {2}));

  // x [N=2, C=2, H=2, W=1]; channel 0 holds {1, 2, 5, 8}, channel 1 {0, 4, 4, 8}.
  std::vector<float> xs = {1, 2, 0, 4, 5, 8, 4, 8};
  Tensor x = Tensor::from_vector<float>(xs, {2, 2, 2, 1});
  const std::vector<std::vector<double>> channel = {{1, 2, 5, 8}, {0, 4, 4, 8}};
  double mean[2], var[2];
  for (int c = 0; c < 2; ++c) {
    mean[c] = var[c] = 0;
    for (double v : channel[c]) mean[c] += v / 4;
    for (double v : channel[c]) var[c] += (v - mean[c]) * (v - mean[c]) / 4;
  }
  const double w[] = {2, 1}, b[] = {0, 1};
  auto expected_output = [&](const double* m, const double* v) {
    std::vector<double> out;
    for (int n = 0; n < 2; ++n) {
      for (int c = 0; c < 2; ++c) {
        for (int h = 0; h < 2; ++h) {
          const double value = xs[(n * 2 + c) * 2 + h];
          out.push_back((value - m[c]) / std::sqrt(v[c] + 1e-5) * w[c] + b[c]);
        }
      }
    }
    return out;
  };
  ASSERT_TRUE(bn.is_training());
  expect_near(bn.forward(x).to_vector<float>(), expected_output(mean, var), 1e-5);
  double running_mean[2], running_var[2];
  for (int c = 0; c < 2; ++c) {
    running_mean[c] = 0.9 * 0 + 0.1 * mean[c];
    running_var[c] = 0.9 * 1 + 0.1 * var[c] * 4 / 3;
  }
  expect_near(bn.running_mean().to_vector<float>(), {running_mean[0], running_mean[1]}, 1e-6);
  expect_near(bn.running_var().to_vector<float>(), {running_var[0], running_var[1]}, 1e-6);

  bn.eval();
  EXPECT_FALSE(bn.is_training());
  expect_near(bn.forward(x).to_vector<float>(), expected_output(running_mean, running_var), 1e-5);
  expect_near(bn.running_mean().to_vector<float>(), {running_mean[0], running_mean[1]}, 1e-6);
  expect_near(bn.running_var().to_vector<float>(), {running_var[0], running_var[1]}, 1e-6);

  expect_error([&] { bn.forward(randn({2, 3, 2, 2})); }, {"BatchNorm2d(2)", "[2, 3, 2, 2]"});
  EXPECT_THAT(dims_of(nn::BatchNorm1d(3).forward(randn({4, 3}))), ElementsAre(4, 3));
}

// Verifies that gradients flow to BatchNorm's parameters but not its buffers.
TEST(NnNormTest, BatchNormGradients) {
  nn::BatchNorm2d bn(3);
  Tensor loss = sum(mul(bn.forward(randn({4, 3, 2, 2})), randn({4, 3, 2, 2})));
  loss.backward();
  EXPECT_TRUE(bn.weight().grad().defined());
  EXPECT_TRUE(bn.bias().grad().defined());
  EXPECT_FALSE(bn.running_mean().grad().defined());
  bn.zero_grad();
  EXPECT_FALSE(bn.weight().grad().defined());
}

// Verifies Dropout: zeros about p of the elements and scales the rest by
// 1 / (1 - p) in training, and is the identity in eval.
TEST(NnLayersTest, DropoutTrainAndEval) {
  nn::Dropout drop(0.5);
  Tensor x = ones({1000});
  auto y = drop.forward(x).to_vector<float>();
  int zeros_count = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0 || v == 2) << v;
    zeros_count += v == 0;
  }
  EXPECT_GT(zeros_count, 400);
  EXPECT_LT(zeros_count, 600);
  drop.eval();
  EXPECT_THAT(drop.forward(Tensor::from_vector<float>({1, 2, 3}, {3})).to_vector<float>(),
              ElementsAre(1, 2, 3));
  expect_error([] { nn::Dropout(1.0); }, {"0 <= p < 1"});
}

// A user-defined module with a nested Sequential, for naming tests.
struct Net : nn::Module {
  Net() {
    features = register_module(
        "features", std::make_shared<nn::Sequential>(nn::Conv2d(1, 4, 3, 1, 1), nn::BatchNorm2d(4),
                                                     nn::ReLU(), nn::MaxPool2d(2)));
    head = register_module("head", std::make_shared<nn::Linear>(4 * 2 * 2, 3));
    scale = register_parameter("scale", ones({1}));
  }
  std::string type_name() const override { return "Net"; }
  Tensor forward(const Tensor& x) override {
    return mul(head->forward(flatten(features->forward(x))), scale);
  }
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Linear> head;
  Tensor scale;
};

// Verifies dotted names, their order, recursive train/eval and to_string.
TEST(NnModuleTest, NestedNamesModesAndSummary) {
  Net net;
  EXPECT_THAT(names_of(net.named_parameters()),
              ElementsAre("scale", "features.0.weight", "features.0.bias", "features.1.weight",
                          "features.1.bias", "head.weight", "head.bias"));
  EXPECT_THAT(names_of(net.named_buffers()),
              ElementsAre("features.1.running_mean", "features.1.running_var"));
  EXPECT_EQ(net.parameters().size(), 7u);
  EXPECT_EQ(net.num_parameters(), 1 + 4 * 9 + 4 + 4 + 4 + 3 * 16 + 3);
  EXPECT_THAT(net.state_dict().keys(),
              ElementsAre("scale", "features.0.weight", "features.0.bias", "features.1.weight",
                          "features.1.bias", "features.1.running_mean", "features.1.running_var",
                          "head.weight", "head.bias"));
  EXPECT_THAT(dims_of(net.forward(randn({2, 1, 4, 4}))), ElementsAre(2, 3));

  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.features->at<nn::BatchNorm2d>(1)->is_training());
  net.train();
  EXPECT_TRUE(net.features->at<nn::BatchNorm2d>(1)->is_training());
  expect_error([&] { net.features->at<nn::Linear>(1); }, {"BatchNorm2d"});
  expect_error([&] { (*net.features)[9]; }, {"out of range"});

  EXPECT_EQ(net.to_string(),
            "Net(\n"
            "  (features): Sequential(\n"
            "    (0): Conv2d(1, 4, kernel_size=3, padding=1)\n"
            "    (1): BatchNorm2d(4, eps=1e-05, momentum=0.1)\n"
            "    (2): ReLU()\n"
            "    (3): MaxPool2d(kernel_size=2, stride=2)\n"
            "  )\n"
            "  (head): Linear(in_features=16, out_features=3, bias=true)\n"
            ")");
}

// Verifies that a parameter shared by two parents (weight tying) appears once
// in parameters() but under both names in state_dict().
TEST(NnModuleTest, SharedChildAppearsOnce) {
  auto shared = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential seq(shared, nn::ReLU(), shared);
  EXPECT_THAT(names_of(seq.named_parameters()), ElementsAre("0.weight", "0.bias"));
  EXPECT_EQ(seq.state_dict().size(), 4u);
}

// Verifies the registration errors.
TEST(NnModuleTest, RegistrationErrors) {
  struct Bad : nn::Module {
    std::string type_name() const override { return "Bad"; }
    void add(const std::string& name, Tensor t) { register_parameter(name, std::move(t)); }
    void buffer(const std::string& name, Tensor t) { register_buffer(name, std::move(t)); }
  } bad;
  bad.add("w", zeros({2}));
  expect_error([&] { bad.add("w", zeros({2})); }, {"Bad", "'w'", "exists"});
  expect_error([&] { bad.buffer("w", zeros({2})); }, {"'w'", "exists"});
  expect_error([&] { bad.add("a.b", zeros({2})); }, {"may not contain '.'"});
  expect_error([&] { bad.add("", zeros({2})); }, {"may not be empty"});
  expect_error([&] { bad.add("i", zeros({2}, DType::kInt64)); }, {"floating-point", "int64"});
  expect_error([&] { bad.add("u", Tensor()); }, {"undefined"});
  expect_error([&] { bad.forward(zeros({1})); }, {"Bad has no single-input forward"});
}

// Verifies that a parameter registered from an op result is detached into a
// leaf, and that requires_grad = false is honoured.
TEST(NnModuleTest, RegisterParameterLeafAndNoGrad) {
  struct M : nn::Module {
    M() {
      Tensor a = ones({2}).requires_grad_();
      derived = register_parameter("derived", mul(a, 2.0));
      frozen = register_parameter("frozen", ones({2}), /*requires_grad=*/false);
    }
    Tensor derived, frozen;
  } m;
  EXPECT_TRUE(m.derived.requires_grad());
  Tensor loss = sum(m.derived);
  loss.backward();
  EXPECT_THAT(m.derived.grad().to_vector<float>(), ElementsAre(1, 1));
  EXPECT_FALSE(m.frozen.requires_grad());
}

// Verifies that manual_seed makes initialization reproducible and that the
// initializers give values in their documented ranges.
TEST(NnInitTest, SeededAndInRange) {
  manual_seed(7);
  nn::Linear a(8, 8);
  manual_seed(7);
  nn::Linear b(8, 8);
  EXPECT_EQ(a.weight().to_vector<float>(), b.weight().to_vector<float>());
  EXPECT_EQ(a.bias().to_vector<float>(), b.bias().to_vector<float>());
  nn::Linear c(8, 8);
  EXPECT_NE(a.weight().to_vector<float>(), c.weight().to_vector<float>());

  Tensor w = Tensor::empty({64, 32});
  const Tensor same = w;  // Another handle sees the new values too.
  nn::init::xavier_uniform_(w);
  const double xavier = std::sqrt(6.0 / 96);
  for (float v : same.to_vector<float>()) EXPECT_LE(std::abs(v), xavier);
  nn::init::kaiming_uniform_(w, 0, nn::init::FanMode::kFanIn, nn::init::Nonlinearity::kReLU);
  const double kaiming = std::sqrt(2.0) * std::sqrt(3.0 / 32);
  double max_abs = 0;
  for (float v : w.to_vector<float>()) max_abs = std::max(max_abs, double{std::abs(v)});
  EXPECT_LE(max_abs, kaiming);
  EXPECT_GT(max_abs, 0.9 * kaiming);

  Tensor big = Tensor::empty({200, 100});
  nn::init::kaiming_normal_(big, 0, nn::init::FanMode::kFanOut, nn::init::Nonlinearity::kReLU);
  double sq = 0;
  for (float v : big.to_vector<float>()) sq += double{v} * v;
  EXPECT_NEAR(std::sqrt(sq / big.numel()), std::sqrt(2.0 / 200), 0.005);
  nn::init::xavier_normal_(big, 2);
  sq = 0;
  for (float v : big.to_vector<float>()) sq += double{v} * v;
  EXPECT_NEAR(std::sqrt(sq / big.numel()), 2 * std::sqrt(2.0 / 300), 0.005);

  nn::init::zeros_(w);
  for (float v : w.to_vector<float>()) EXPECT_EQ(v, 0);
  nn::init::ones_(w);
  for (float v : w.to_vector<float>()) EXPECT_EQ(v, 1);
  EXPECT_NEAR(nn::init::calculate_gain(nn::init::Nonlinearity::kLeakyReLU, std::sqrt(5.0)),
              std::sqrt(1.0 / 3), 1e-12);
  expect_error([] { nn::init::xavier_uniform_(Tensor::empty({3})); }, {"rank >= 2"});
}

// Verifies the save -> load round trip: a fresh model (other seed) given the
// checkpoint computes identical outputs, running statistics included.
TEST(NnStateDictTest, SaveLoadRoundTrip) {
  manual_seed(1);
  Net trained;
  for (int i = 0; i < 3; ++i) trained.forward(randn({4, 1, 4, 4}));  // Moves running stats.
  trained.eval();
  const std::string path = temp_path("tandem_nn_roundtrip.params");
  trained.save(path);

  manual_seed(2);
  Net fresh;
  fresh.eval();
  Tensor x = randn({3, 1, 4, 4});
  EXPECT_NE(fresh.forward(x).to_vector<float>(), trained.forward(x).to_vector<float>());
  fresh.load(path);
  EXPECT_EQ(fresh.forward(x).to_vector<float>(), trained.forward(x).to_vector<float>());
  for (const auto& [name, tensor] : trained.state_dict()) {
    EXPECT_EQ(fresh.state_dict().at(name).to_vector<float>(), tensor.to_vector<float>()) << name;
  }
  EXPECT_TRUE(fresh.head->weight().requires_grad());  // Loading keeps autograd state.

  // Every dtype and a scalar survive the file format.
  nn::StateDict mixed;
  mixed.insert("f64", Tensor::from_vector<double>({1.5, -2}, {2}));
  mixed.insert("i64", Tensor::from_vector<int64_t>({1, 2, 3}, {3, 1}));
  mixed.insert("u8", Tensor::from_vector<uint8_t>({255}, {1}).reshape({}));
  mixed.insert("empty", zeros({0, 3}));
  nn::write_state_dict(path, mixed);
  nn::StateDict back = nn::read_state_dict(path);
  EXPECT_THAT(back.keys(), ElementsAre("f64", "i64", "u8", "empty"));
  EXPECT_THAT(back.at("f64").to_vector<double>(), ElementsAre(1.5, -2));
  EXPECT_THAT(dims_of(back.at("i64")), ElementsAre(3, 1));
  EXPECT_THAT(back.at("u8").to_vector<uint8_t>(), ElementsAre(255));
  EXPECT_THAT(dims_of(back.at("empty")), ElementsAre(0, 3));
  std::filesystem::remove(path);
}

// Verifies that the state dict is a snapshot: later updates do not change it.
TEST(NnStateDictTest, StateDictIsASnapshot) {
  nn::Linear fc(2, 2);
  nn::StateDict before = fc.state_dict();
  auto values = before.at("weight").to_vector<float>();
  nn::init::zeros_(fc.weight());
  EXPECT_EQ(before.at("weight").to_vector<float>(), values);
  fc.load_state_dict(before);
  EXPECT_EQ(fc.weight().to_vector<float>(), values);
}

// Verifies load_state_dict's errors name the keys and shapes, and that a
// failed load changes nothing.
TEST(NnStateDictTest, LoadMismatchErrors) {
  Net net;
  const auto weight = net.head->weight().to_vector<float>();
  nn::StateDict good = net.state_dict();

  nn::StateDict missing;
  for (const auto& [name, t] : good) {
    if (name != "head.bias") missing.insert(name, t);
  }
  expect_error([&] { net.load_state_dict(missing); }, {"missing keys: head.bias"});
  net.load_state_dict(missing, /*strict=*/false);  // Allowed when not strict.

  nn::StateDict unexpected = good;
  unexpected.insert("head.extra", zeros({1}));
  expect_error([&] { net.load_state_dict(unexpected); }, {"unexpected keys: head.extra"});

  nn::StateDict wrong_shape;
  for (const auto& [name, t] : good) {
    wrong_shape.insert(name, name == "head.weight" ? zeros({3, 15}) : t);
  }
  nn::init::constant_(net.scale, 5);  // The state dict has 1: must stay 5.
  expect_error(
      [&] { net.load_state_dict(wrong_shape); },
      {"'head.weight'", "float32[3, 15] in the state dict", "float32[3, 16] in the model"});
  EXPECT_EQ(net.head->weight().to_vector<float>(), weight);
  EXPECT_THAT(net.scale.to_vector<float>(), ElementsAre(5));  // Earlier entries not loaded either.

  nn::StateDict wrong_dtype;
  for (const auto& [name, t] : good) {
    wrong_dtype.insert(name, name == "scale" ? Tensor::from_vector<double>({1}, {1}) : t);
  }
  expect_error([&] { net.load_state_dict(wrong_dtype); }, {"'scale'", "float64[1]", "float32[1]"});

  expect_error([&] { good.insert("scale", zeros({1})); }, {"already has an entry 'scale'"});
  expect_error([&] { good.at("nope"); }, {"no entry 'nope'"});
}

// Verifies that a bad checkpoint surfaces through Module::load as the params
// reader's error (serialization/params.h; every malformed-file case is tested
// in tests/serialization/params_test.cc), and that the model keeps its values.
TEST(NnStateDictTest, LoadOfABadFileNamesFileAndOffset) {
  Net net;
  const auto weight = net.head->weight().to_vector<float>();
  const std::string path = temp_path("tandem_nn_bad.params");
  net.save(path);
  const std::string good = read_bytes(path);
  write_bytes(path, good.substr(0, good.size() - 1));
  expect_error([&] { net.load(path); },
               {"params file '" + path + "'", "truncated: tensor 'head.bias' needs bytes up to",
                "byte offset"});
  EXPECT_EQ(net.head->weight().to_vector<float>(), weight);
  write_bytes(path, "TNDMSD01" + good.substr(8));
  expect_error([&] { net.load(path); }, {path, "old TNDMSD01 format", "byte offset 0"});
  std::filesystem::remove(path);
  expect_error([&] { net.load(path); }, {"cannot open", path});
  expect_error([&] { net.save("/nonexistent-dir/x.params"); },
               {"cannot write", "/nonexistent-dir/x.params"});
}

TEST(NnSequenceModulesTest, SoftmaxAndIdentity) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 0, 0, 0}, {2, 3});
  std::vector<float> p = nn::Softmax(1).forward(x).to_vector<float>();
  const float total = std::exp(1.f) + std::exp(2.f) + std::exp(3.f);
  EXPECT_NEAR(p[0], std::exp(1.f) / total, 1e-6);
  EXPECT_NEAR(p[5], 1.f / 3, 1e-6);
  std::vector<float> column = nn::Softmax(0).forward(x).to_vector<float>();
  EXPECT_NEAR(column[0], std::exp(1.f) / (std::exp(1.f) + 1), 1e-6);
  EXPECT_EQ(nn::Softmax(1).to_string(), "Softmax(dim=1)");
  nn::Identity identity;
  EXPECT_EQ(identity.forward(x).to_vector<float>(), x.to_vector<float>());
}

TEST(NnSequenceModulesTest, PositionalEncodingAddsTheSinusoids) {
  nn::PositionalEncoding pos({.d_model = 5, .max_len = 7, .dropout = 0.5});
  EXPECT_TRUE(pos.named_parameters().empty());
  EXPECT_TRUE(pos.state_dict().empty());  // Recomputed, not saved.
  pos.eval();                             // No dropout.
  Tensor x = randn({2, 4, 5});
  std::vector<float> y = pos.forward(x).to_vector<float>(), in = x.to_vector<float>();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t p = 0; p < 4; ++p) {
      for (int64_t i = 0; i < 5; ++i) {
        const double angle = p / std::pow(10000.0, (i - i % 2) / 5.0);
        const double want = (i % 2 == 0 ? std::sin(angle) : std::cos(angle));
        const size_t k = static_cast<size_t>((b * 4 + p) * 5 + i);
        EXPECT_NEAR(y[k] - in[k], want, 1e-6) << b << " " << p << " " << i;
      }
    }
  }
  // Sequence first: the same signal along axis 0.
  nn::PositionalEncoding seq_first({.d_model = 5, .max_len = 7, .batch_first = false});
  seq_first.eval();
  EXPECT_EQ(transpose(seq_first.forward(transpose(x, {1, 0, 2})), {1, 0, 2}).to_vector<float>(), y);
  expect_error(
      [&] {
        pos.forward(randn({2, 8, 5}));
      },
      {"8 positions, more than max_len = 7", "[2, 8, 5]"});
  expect_error([&] { pos.forward(randn({2, 4, 6})); }, {"PositionalEncoding(d_model=5)"});
  // Training: dropout on the sum.
  pos.train();
  std::vector<float> dropped = pos.forward(x).to_vector<float>();
  int zeros = 0;
  for (float v : dropped) zeros += v == 0;
  EXPECT_GT(zeros, 5);
}

TEST(NnContainersTest, ModuleListAndModuleDict) {
  nn::ModuleList list(nn::Linear(2, 3), nn::ReLU());
  list.push_back(std::make_shared<nn::Linear>(3, 1));
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(names_of(list.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(list.at<nn::Linear>(2)->options().out_features, 1);
  size_t visited = 0;
  for (const auto& module : list) visited += module != nullptr;
  EXPECT_EQ(visited, 3u);
  expect_error([&] { list[3]; }, {"ModuleList index 3 is out of range for 3 modules"});
  expect_error([&] { list.at<nn::Linear>(1); }, {"ModuleList::at(1)", "ReLU"});
  expect_error([&] { list.forward(ones({1, 2})); }, {"ModuleList has no single-input forward"});

  nn::ModuleDict dict;
  dict.insert("encoder", nn::Linear(4, 2));
  auto head = std::make_shared<nn::Linear>(2, 1);
  EXPECT_EQ(dict.insert("head", head), head);  // A shared_ptr is shared, not copied.
  EXPECT_TRUE(dict.contains("head"));
  EXPECT_FALSE(dict.contains("decoder"));
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"encoder", "head"}));
  EXPECT_EQ(
      names_of(dict.named_parameters()),
      (std::vector<std::string>{"encoder.weight", "encoder.bias", "head.weight", "head.bias"}));
  expect_error([&] { dict["decoder"]; }, {"no module 'decoder'", "encoder, head"});
  expect_error([&] { dict.insert("head", nn::ReLU()); }, {"head"});
}

TEST(NnEmbeddingTest, PaddingIdxGivesZerosAndNoGradient) {
  nn::Embedding embed(5, 3, DType::kFloat32, /*padding_idx=*/-1);  // Row 4.
  EXPECT_EQ(embed.padding_idx(), 4);
  std::vector<float> weight = embed.weight().to_vector<float>();
  EXPECT_THAT(std::vector<float>(weight.begin() + 12, weight.end()), ::testing::Each(0.0f));
  Tensor tokens = Tensor::from_vector<int64_t>({1, 4, 4, 2}, {2, 2});
  Tensor out = embed.forward(tokens);
  std::vector<float> y = out.to_vector<float>();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y[static_cast<size_t>(i)], weight[3 + i]);  // Row 1.
  EXPECT_THAT(std::vector<float>(y.begin() + 3, y.begin() + 9), ::testing::Each(0.0f));
  sum(mul(out, full({2, 2, 3}, 2.0))).backward();
  std::vector<float> grad = embed.weight().grad().to_vector<float>();
  EXPECT_THAT(std::vector<float>(grad.begin() + 12, grad.end()), ::testing::Each(0.0f));
  EXPECT_EQ(grad[3], 2.0f);  // Row 1, used once.
  EXPECT_EQ(embed.to_string(), "Embedding(5, 3, padding_idx=4)");
  expect_error([] { nn::Embedding(5, 3, DType::kFloat32, 5); },
               {"padding_idx 5 is out of range for 5 embeddings"});
}

}  // namespace
}  // namespace tandem
