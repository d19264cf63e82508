// ONNX's GridSample through the importer (serialization/onnx_grid_sample.cc)
// against a point-by-point reference written from ONNX's definition, for
// every mode, padding mode and align_corners, on random images and grids
// that reach past the image's borders.
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

struct Image {
  int64_t h, w;
  const float* pixels;  // One channel: [h, w].
};

// x mirrored into [low, high], as ONNX's reference does it: by the near
// border, as many times as it takes.
double reflect(double x, double low, double high) {
  const double range = high - low;
  if (x < low) {
    const double dx = low - x;
    const int64_t k = static_cast<int64_t>(dx / range);
    const double r = dx - double(k) * range;
    return k % 2 == 0 ? low + r : high - r;
  }
  if (x > high) {
    const double dx = x - high;
    const int64_t k = static_cast<int64_t>(dx / range);
    const double r = dx - double(k) * range;
    return k % 2 == 0 ? high - r : low + r;
  }
  return x;
}

struct Reference {
  std::string mode, padding;
  bool corners;

  double low(int64_t size) const { return corners ? 0 : -0.5; }
  double high(int64_t size) const { return corners ? double(size - 1) : size - 0.5; }

  // The index a tap at i reads along an axis of `size`, or -1 for zero.
  int64_t read(int64_t i, int64_t size) const {
    if (padding == "zeros") return i >= 0 && i < size ? i : -1;
    if (padding == "border") return std::clamp<int64_t>(i, 0, size - 1);
    return static_cast<int64_t>(reflect(double(i), low(size), high(size)));
  }
  double pixel(const Image& im, int64_t y, int64_t x) const {
    const int64_t ry = read(y, im.h), rx = read(x, im.w);
    return ry < 0 || rx < 0 ? 0.0 : im.pixels[ry * im.w + rx];
  }
  double coordinate(double g, int64_t size) const {
    double p = corners ? (g + 1) / 2 * double(size - 1) : ((g + 1) * double(size) - 1) / 2;
    if (mode == "nearest") p = std::nearbyint(p);
    if (p < low(size) || p > high(size)) {
      if (padding == "border") p = std::clamp(p, 0.0, double(size - 1));
      if (padding == "reflection") p = reflect(p, low(size), high(size));
    }
    return p;
  }
  static std::vector<double> cubic(double t) {
    const double a = -0.75;
    auto far = [&](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
    auto near = [&](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
    return {far(t + 1), near(t), near(1 - t), far(2 - t)};
  }
  double sample(const Image& im, double gx, double gy) const {
    const double x = coordinate(gx, im.w), y = coordinate(gy, im.h);
    if (mode == "nearest") return pixel(im, int64_t(y), int64_t(x));
    const int64_t x0 = int64_t(std::floor(x)), y0 = int64_t(std::floor(y));
    const double tx = x - double(x0), ty = y - double(y0);
    if (mode == "bilinear") {
      return (1 - ty) * ((1 - tx) * pixel(im, y0, x0) + tx * pixel(im, y0, x0 + 1)) +
             ty * ((1 - tx) * pixel(im, y0 + 1, x0) + tx * pixel(im, y0 + 1, x0 + 1));
    }
    const std::vector<double> wx = cubic(tx), wy = cubic(ty);
    double sum = 0;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) sum += wy[i] * wx[j] * pixel(im, y0 - 1 + i, x0 - 1 + j);
    }
    return sum;
  }
};

TEST(OnnxGridSampleTest, MatchesItsDefinitionPointByPoint) {
  const int64_t n = 2, c = 3, h = 4, w = 5, ho = 3, wo = 6;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> pixels(-1, 1), points(-1.6f, 1.6f);
  std::vector<float> x(size_t(n * c * h * w)), grid(size_t(n * ho * wo * 2));
  for (float& v : x) v = pixels(rng);
  for (float& v : grid) v = points(rng);
  for (const std::string mode : {"bilinear", "nearest", "bicubic"}) {
    for (const std::string padding : {"zeros", "border", "reflection"}) {
      for (const bool corners : {false, true}) {
        SCOPED_TRACE(str_cat(mode, ", ", padding, ", align_corners ", corners));
        onnx::ModelProto m = testing::model_with_opset(16);
        onnx::GraphProto& g = *m.mutable_graph();
        testing::add_input(g, "X", {str_cat(n), str_cat(c), str_cat(h), str_cat(w)});
        testing::add_input(g, "grid", {str_cat(n), str_cat(ho), str_cat(wo), "2"});
        onnx::NodeProto* node = testing::add_node(g, "GridSample", {"X", "grid"}, {"Y"});
        testing::set_attribute(node, "mode", mode);
        testing::set_attribute(node, "padding_mode", padding);
        testing::set_attribute(node, "align_corners", int64_t{corners});
        g.add_output()->set_name("Y");
        const Tensor y = import_onnx(testing::bytes_of(m), "grid_sample.onnx")
                             .run({Tensor::from_vector<float>(x, Shape{n, c, h, w}),
                                   Tensor::from_vector<float>(grid, Shape{n, ho, wo, 2})})
                             .at(0);
        ASSERT_EQ(y.shape(), (Shape{n, c, ho, wo}));
        const std::vector<float> got = y.to_vector<float>();
        const Reference ref{mode, padding, corners};
        for (int64_t b = 0; b < n; ++b) {
          for (int64_t ch = 0; ch < c; ++ch) {
            const Image im{h, w, &x[size_t((b * c + ch) * h * w)]};
            for (int64_t p = 0; p < ho * wo; ++p) {
              const float* g2 = &grid[size_t((b * ho * wo + p) * 2)];
              EXPECT_NEAR(got[size_t((b * c + ch) * ho * wo + p)], ref.sample(im, g2[0], g2[1]),
                          1e-4)
                  << "batch " << b << ", channel " << ch << ", point " << p;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem
