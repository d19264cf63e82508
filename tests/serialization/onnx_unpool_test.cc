// MaxPool's Indices output and MaxUnpool through the importer, on random
// inputs: every index points at its window's maximum in the flattened
// input (row- or column-major within the plane), and unpooling puts each
// maximum back at its index with zeros elsewhere.
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

TEST(OnnxUnpoolTest, IndicesPointAtMaximaAndUnpoolPutsThemBack) {
  const int64_t n = 2, c = 3, h = 6, w = 7;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> x(size_t(n * c * h * w));
  for (float& v : x) v = uniform(rng);
  for (const int64_t order : {0, 1}) {
    SCOPED_TRACE(str_cat("storage_order ", order));
    onnx::ModelProto m = testing::model_with_opset(12);
    onnx::GraphProto& g = *m.mutable_graph();
    testing::add_input(g, "x", {str_cat(n), str_cat(c), str_cat(h), str_cat(w)});
    onnx::NodeProto* pool = testing::add_node(g, "MaxPool", {"x"}, {"y", "i"});
    testing::set_attribute(pool, "kernel_shape", std::vector<int64_t>{2, 3});
    testing::set_attribute(pool, "strides", std::vector<int64_t>{2, 2});
    testing::set_attribute(pool, "pads", std::vector<int64_t>{1, 1, 1, 1});
    testing::set_attribute(pool, "storage_order", order);
    onnx::NodeProto* unpool = testing::add_node(g, "MaxUnpool", {"y", "i"}, {"u"});
    testing::set_attribute(unpool, "kernel_shape", std::vector<int64_t>{2, 3});
    testing::set_attribute(unpool, "strides", std::vector<int64_t>{2, 2});
    testing::set_attribute(unpool, "pads", std::vector<int64_t>{1, 1, 1, 1});
    for (const char* out : {"y", "i"}) g.add_output()->set_name(out);
    if (order == 0) g.add_output()->set_name("u");
    const std::vector<Tensor> out = import_onnx(testing::bytes_of(m), "unpool.onnx")
                                        .run({Tensor::from_vector<float>(x, Shape{n, c, h, w})});
    const std::vector<float> y = out[0].to_vector<float>();
    const std::vector<int64_t> idx = out[1].to_vector<int64_t>();
    ASSERT_EQ(out[0].shape(), (Shape{n, c, 4, 4}));
    std::vector<float> unpooled(x.size(), 0.0f);
    for (size_t k = 0; k < y.size(); ++k) {
      // From the plane's column-major index back to row-major.
      const int64_t plane = idx[k] / (h * w), at = idx[k] % (h * w);
      const int64_t row = order == 0 ? at / w : at % h, col = order == 0 ? at % w : at / h;
      ASSERT_GE(idx[k], 0);
      ASSERT_LT(idx[k], n * c * h * w);
      const size_t flat = size_t(plane * h * w + row * w + col);
      EXPECT_EQ(x[flat], y[k]) << "output " << k;
      // The maximum of its window: no input of the window exceeds it.
      const int64_t oy = int64_t(k) / 4 % 4, ox = int64_t(k) % 4;
      for (int64_t dy = 0; dy < 2; ++dy) {
        for (int64_t dx = 0; dx < 3; ++dx) {
          const int64_t iy = oy * 2 - 1 + dy, ix = ox * 2 - 1 + dx;
          if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
          EXPECT_LE(x[size_t(plane * h * w + iy * w + ix)], y[k]) << "output " << k;
        }
      }
      unpooled[flat] = y[k];
    }
    if (order == 0) EXPECT_EQ(out[2].to_vector<float>(), unpooled);
  }
}

}  // namespace
}  // namespace tandem
