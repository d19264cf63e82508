// Module::export_onnx: Tandem models written as ONNX files that ONNX's own
// checker accepts, that read back (tandem::import_onnx) to the eager
// answers at the traced batch and at others, and refusals that name the
// node (serialization/onnx_export.h).
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "serialization/file_io.h"
#include "serialization/onnx_file.h"
#include "serialization/onnx_import.h"
#include "tests/eager/float64_values.h"
#include "tests/error_of.h"

#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::expect_near;
using ::testing::HasSubstr;
using testing::values_of;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / str_cat("tandem-onnx-export-", ::getpid());
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

// ONNX's checker, with its shape inference, on the file.
void expect_valid_onnx(const std::string& path) {
  const std::vector<uint8_t> bytes = serialization::read_file(path, 1 << 30);
  onnx::ModelProto model = serialization::parse_onnx_model(bytes, path);
  try {
    onnx::checker::check_model(model);
    // Strict shape inference: every node's output shape must follow, and
    // agree with the declared outputs.
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       {/*check_type=*/true, /*error_mode=*/1});
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << " fails ONNX's checker: " << e.what();
  }
}

// Exports `net` (hybridized and called at `traced`), checks the file and
// reads it back, then compares with the eager module at every batch size.
void round_trip(nn::Module& net, const Shape& traced, const std::string& path,
                std::vector<int64_t> batches) {
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  const auto dims = traced.dims();
  net(randn(std::vector<int64_t>(dims.begin(), dims.end())));
  net.export_onnx(path);
  expect_valid_onnx(path);
  const LoadedModel loaded = import_onnx(path);
  EXPECT_EQ(loaded.inputs()[0].free_dims[0], "batch");
  for (int64_t batch : batches) {
    SCOPED_TRACE(str_cat("batch ", batch));
    std::vector<int64_t> shape(dims.begin(), dims.end());
    shape[0] = batch;
    const Tensor x = randn(shape);
    const Tensor want = net.forward(x), got = loaded.run({x})[0];
    EXPECT_EQ(got.shape(), want.shape());
    expect_near(values_of(got), values_of(want), 1e-5);
  }
}

TEST(OnnxExport, ConvolutionalNetworkRoundTrips) {
  Scratch scratch;
  manual_seed(11);
  nn::Sequential net(nn::Conv2d(3, 8, 3, 1, 1), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Conv2d(8, 4, 3, 2, 1), nn::Sigmoid(), nn::AvgPool2d(2), nn::Flatten(),
                     nn::Linear(16, 10), nn::Softmax(1));
  round_trip(net, Shape{4, 3, 16, 16}, scratch.file("cnn.onnx"), {1, 4, 7});
}

TEST(OnnxExport, TransformerBlockRoundTrips) {
  Scratch scratch;
  manual_seed(12);
  nn::Sequential net(nn::Linear(16, 32), nn::GELU(), nn::LayerNorm(std::vector<int64_t>{32}),
                     nn::Linear(32, 16), nn::Tanh(), nn::Softmax(-1));
  round_trip(net, Shape{3, 5, 16}, scratch.file("block.onnx"), {1, 3, 9});
}

TEST(OnnxExport, RecurrentLayersRoundTrip) {
  Scratch scratch;
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE(kind);
    manual_seed(14 + uint64_t(kind));
    const nn::RecurrentOptions options{.input_size = 4, .hidden_size = 6, .num_layers = 2};
    nn::Sequential net = kind == 0   ? nn::Sequential(nn::LSTM(options))
                         : kind == 1 ? nn::Sequential(nn::GRU(options))
                                     : nn::Sequential(nn::RNN(options));
    round_trip(net, Shape{2, 5, 4}, scratch.file(str_cat("rnn", kind, ".onnx")), {1, 2, 6});
  }
}

TEST(OnnxExport, EmbeddingModelRoundTrips) {
  Scratch scratch;
  manual_seed(17);
  nn::Sequential net(nn::Embedding(50, 8), nn::Linear(8, 4), nn::ReLU());
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  auto tokens = [](int64_t batch) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < batch * 6; ++i) ids.push_back((i * 37 + 11) % 50);
    return Tensor::from_vector<int64_t>(ids, Shape{batch, 6});
  };
  net(tokens(2));
  const std::string path = scratch.file("embedding.onnx");
  net.export_onnx(path);
  expect_valid_onnx(path);
  const LoadedModel loaded = import_onnx(path);
  for (int64_t batch : {1, 5}) {
    const Tensor x = tokens(batch);
    expect_near(values_of(loaded.run({x})[0]), values_of(net.forward(x)), 1e-6);
  }
}

TEST(OnnxExport, WhatHasNoOnnxFormIsRefusedNamingTheNode) {
  Scratch scratch;
  manual_seed(13);
  nn::MultiheadAttention net(8, 2);
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  net(randn({2, 5, 8}));
  const std::string path = scratch.file("attention.onnx");
  const std::string error = error_of([&] { net.export_onnx(path); });
  EXPECT_THAT(error, HasSubstr("export_onnx('" + path + "'): the graph cannot be written as ONNX"));
  EXPECT_THAT(error, HasSubstr("(scaled_dot_product_attention, traced at"));
  EXPECT_THAT(error, HasSubstr("no ONNX form yet"));
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace tandem
