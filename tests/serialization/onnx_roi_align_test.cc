// ONNX's RoiAlign through the importer (serialization/onnx_roi_align.cc)
// against the sample-by-sample loops of ONNX's reference, written out here,
// for both coordinate modes, on random images and regions that reach past
// the image.
#include <algorithm>
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

// One bilinear sample of a [height, width] plane, as ONNX's reference takes
// it.
double sample(const float* plane, int64_t height, int64_t width, double y, double x) {
  if (y < -1.0 || y > double(height) || x < -1.0 || x > double(width)) return 0;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y_low = int64_t(y), x_low = int64_t(x), y_high = 0, x_high = 0;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = double(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = double(x_low);
  } else {
    x_high = x_low + 1;
  }
  const double ly = y - double(y_low), lx = x - double(x_low), hy = 1 - ly, hx = 1 - lx;
  return hy * hx * plane[y_low * width + x_low] + hy * lx * plane[y_low * width + x_high] +
         ly * hx * plane[y_high * width + x_low] + ly * lx * plane[y_high * width + x_high];
}

TEST(OnnxRoiAlignTest, MatchesTheReferenceLoops) {
  const int64_t n = 2, c = 3, h = 8, w = 9, regions = 4, out_h = 3, out_w = 4, ratio = 2;
  const double scale = 0.5;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> pixels(-1, 1), corners(-3, 20);
  std::vector<float> x(static_cast<size_t>(n * c * h * w)), rois;
  for (float& v : x) v = pixels(rng);
  for (int64_t r = 0; r < regions; ++r) {
    const float a = corners(rng), b = corners(rng), d = corners(rng), e = corners(rng);
    rois.insert(rois.end(), {std::min(a, b), std::min(d, e), std::max(a, b), std::max(d, e)});
  }
  const std::vector<int64_t> batch = {0, 1, 1, 0};
  for (const std::string mode : {"half_pixel", "output_half_pixel"}) {
    SCOPED_TRACE(mode);
    onnx::ModelProto m = testing::model_with_opset(16);
    onnx::GraphProto& g = *m.mutable_graph();
    testing::add_input(g, "X", {str_cat(n), str_cat(c), str_cat(h), str_cat(w)});
    testing::add_input(g, "rois", {str_cat(regions), "4"});
    testing::add_input(g, "batch_indices", {str_cat(regions)});
    g.mutable_input(2)->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto_DataType_INT64);
    onnx::NodeProto* node = testing::add_node(g, "RoiAlign", {"X", "rois", "batch_indices"}, {"Y"});
    testing::set_attribute(node, "coordinate_transformation_mode", mode);
    testing::set_attribute(node, "output_height", out_h);
    testing::set_attribute(node, "output_width", out_w);
    testing::set_attribute(node, "sampling_ratio", ratio);
    testing::set_attribute(node, "spatial_scale", float(scale));
    g.add_output()->set_name("Y");
    const Tensor y = import_onnx(testing::bytes_of(m), "roi_align.onnx")
                         .run({Tensor::from_vector<float>(x, Shape{n, c, h, w}),
                               Tensor::from_vector<float>(rois, Shape{regions, 4}),
                               Tensor::from_vector<int64_t>(batch, Shape{regions})})
                         .at(0);
    ASSERT_EQ(y.shape(), (Shape{regions, c, out_h, out_w}));
    const std::vector<float> got = y.to_vector<float>();
    const bool half = mode == "half_pixel";
    for (int64_t r = 0; r < regions; ++r) {
      const double offset = half ? 0.5 : 0;
      const double x0 = rois[size_t(4 * r)] * scale - offset,
                   y0 = rois[size_t(4 * r + 1)] * scale - offset;
      double width = rois[size_t(4 * r + 2)] * scale - offset - x0,
             height = rois[size_t(4 * r + 3)] * scale - offset - y0;
      if (!half) {
        width = std::max(width, 1.0);
        height = std::max(height, 1.0);
      }
      const double bin_h = height / double(out_h), bin_w = width / double(out_w);
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* plane = &x[size_t((batch[size_t(r)] * c + ch) * h * w)];
        for (int64_t ph = 0; ph < out_h; ++ph) {
          for (int64_t pw = 0; pw < out_w; ++pw) {
            double sum = 0;
            for (int64_t iy = 0; iy < ratio; ++iy) {
              for (int64_t ix = 0; ix < ratio; ++ix) {
                sum += sample(plane, h, w,
                              y0 + double(ph) * bin_h + (double(iy) + 0.5) * bin_h / ratio,
                              x0 + double(pw) * bin_w + (double(ix) + 0.5) * bin_w / ratio);
              }
            }
            EXPECT_NEAR(got[size_t(((r * c + ch) * out_h + ph) * out_w + pw)],
                        sum / (ratio * ratio), 1e-5)
                << "region " << r << ", channel " << ch << ", bin " << ph << ", " << pw;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem
