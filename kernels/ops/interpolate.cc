// interpolate: x [N, C, spatial...] (1 to 3 spatial axes) resized to `size`,
// by nearest neighbour or (bi/tri)linear interpolation with align_corners
// either way (torch's F.interpolate with a size; ONNX Resize's asymmetric
// nearest floor and half_pixel / align_corners linear), and
// interpolate_backward, its gradient: each output's gradient spread back
// over the input positions it read, with their weights. The coordinates are
// Note [Interpolation coordinates] in kernels/interpolation.h.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/interpolation.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {

InterpolationMode interpolation_mode(const Attrs& attrs) {
  const std::string& mode = attrs.get_string("mode");
  if (mode == "nearest") return InterpolationMode::kNearest;
  if (mode == "linear") return InterpolationMode::kLinear;
  TANDEM_CHECK(false, "unknown interpolation mode '", mode,
               "'; expected nearest or linear (linear is bilinear over two spatial axes, "
               "trilinear over three)");
  return InterpolationMode::kNearest;  // Unreachable.
}

namespace {

using Ints = std::vector<int64_t>;

// `shape` ([N, C, spatial...]) with its spatial axes set to `spatial`,
// after checking both; `what` names the attribute.
Shape resized(const Shape& shape, const Ints& spatial, const Attrs& attrs, const char* what) {
  const int d = static_cast<int>(spatial.size());
  TANDEM_CHECK(d >= 1 && d <= 3 && shape.rank() == d + 2, what, " ", ints_to_string(spatial),
               " must give 1 to 3 spatial sizes, one for each axis after [N, C] of ",
               shape.to_string());
  const InterpolationMode mode = interpolation_mode(attrs);
  TANDEM_CHECK(mode == InterpolationMode::kLinear || !attrs.get_bool("align_corners"),
               "align_corners applies to linear interpolation only, not nearest");
  Shape::Dims dims(shape.begin(), shape.end());
  for (int k = 0; k < d; ++k) {
    TANDEM_CHECK(spatial[k] >= 1, what, " ", ints_to_string(spatial), " has ", spatial[k],
                 " at spatial axis ", k, "; sizes must be at least 1");
    TANDEM_CHECK(shape[k + 2] >= 1, "cannot interpolate from an empty axis: ", shape.to_string());
    // Nearest multiplies an output position by the input size.
    checked_mul(shape[k + 2], spatial[k], "the interpolation of axis ", k + 2, " of ",
                shape.to_string(), " to ", spatial[k]);
    dims[k + 2] = spatial[k];
  }
  return Shape(dims);
}

TensorMetas infer_interpolate(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("x", in[0].dtype);
  return {{resized(in[0].shape, attrs.get_ints("size"), attrs, "size"), in[0].dtype}};
}

TensorMetas infer_interpolate_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("the gradient", in[0].dtype);
  const Ints& input_size = attrs.get_ints("input_size");
  Shape input = resized(in[0].shape, input_size, attrs, "input_size");
  Ints size(in[0].shape.begin() + 2, in[0].shape.end());
  // The forward from `input` to g's size must be a valid call too.
  resized(input, size, attrs, "the gradient's spatial size");
  return {{input, in[0].dtype}};
}

// What each output element of an [N, C] plane reads: built once per call,
// visited per plane. `from` and `to` are the spatial shapes.
class Taps {
 public:
  Taps(const Attrs& attrs, absl::Span<const int64_t> from, absl::Span<const int64_t> to)
      : to_(to.begin(), to.end()), strides_(from.size(), 1), samples_(from.size()) {
    const int d = static_cast<int>(from.size());
    const InterpolationMode mode = interpolation_mode(attrs);
    const bool align_corners = attrs.get_bool("align_corners");
    for (int k = d - 1; k >= 0; --k) {
      if (k + 1 < d) strides_[k] = strides_[k + 1] * from[k + 1];
      for (int64_t o = 0; o < to[k]; ++o) {
        samples_[k].push_back(axis_sample(mode, align_corners, o, from[k], to[k]));
      }
    }
    corners_ = mode == InterpolationMode::kNearest ? 1 : 1 << d;
  }

  // Calls tap(o, i, weight) for every input element i that output element o
  // reads: nearest reads one, linear the 2^d corners.
  template <class Tap>
  void visit(Tap tap) const {
    const int d = static_cast<int>(to_.size());
    Ints index(d, 0);
    int64_t plane = 1;
    for (int64_t size : to_) plane *= size;
    for (int64_t o = 0; o < plane; ++o) {
      for (int corner = 0; corner < corners_; ++corner) {
        double weight = 1;
        int64_t at = 0;
        for (int k = 0; k < d; ++k) {
          const AxisSample& s = samples_[k][index[k]];
          const bool high = (corner >> k) & 1;
          weight *= high ? s.weight : 1 - s.weight;
          at += (high ? s.high : s.low) * strides_[k];
        }
        tap(o, at, weight);
      }
      for (int k = d - 1; k >= 0; --k) {
        if (++index[k] < to_[k]) break;
        index[k] = 0;
      }
    }
  }

 private:
  Ints to_;
  Ints strides_;  // Of the input's spatial axes.
  std::vector<std::vector<AxisSample>> samples_;
  int corners_ = 1;
};

// dst = src resampled (kAdjoint: by the transpose of the resampling, which
// spreads each output back over what it read), one [N, C] plane at a time,
// summing in double.
template <bool kAdjoint>
void resample(const Attrs& attrs, const Tensor& src, const Tensor& dst) {
  const Shape& input = kAdjoint ? dst.shape() : src.shape();
  const Shape& output = kAdjoint ? src.shape() : dst.shape();
  const int64_t planes = input[0] * input[1];
  if (planes == 0) return;  // Before the taps: an empty batch may name any size.
  const Taps taps(attrs, input.dims().subspan(2), output.dims().subspan(2));
  const int64_t src_plane = src.numel() / planes, dst_plane = dst.numel() / planes;
  visit_floating(src.dtype(), [&]<class T>() {
    std::vector<double> sum(static_cast<size_t>(dst_plane));
    for (int64_t p = 0; p < planes; ++p) {
      const T* from = src.data<T>() + p * src_plane;
      T* to = dst.data<T>() + p * dst_plane;
      std::fill(sum.begin(), sum.end(), 0.0);
      taps.visit([&](int64_t o, int64_t i, double weight) {
        if constexpr (kAdjoint) {
          sum[i] += weight * from[o];
        } else {
          sum[o] += weight * from[i];
        }
      });
      for (int64_t k = 0; k < dst_plane; ++k) to[k] = static_cast<T>(sum[k]);
    }
  });
}

void interpolate_kernel(const KernelContext& c) {
  resample<false>(c.attrs, c.inputs[0], c.outputs[0]);
}

void interpolate_backward_kernel(const KernelContext& c) {
  resample<true>(c.attrs, c.inputs[0], c.outputs[0]);
}

Attrs sampling(const Attrs& attrs) {
  return {{"mode", attrs.get_string("mode")}, {"align_corners", attrs.get_bool("align_corners")}};
}

std::vector<Tensor> interpolate_gradient(const GradContext& c) {
  Attrs attrs = sampling(c.attrs);
  const Shape& x = c.inputs[0].shape();
  attrs.set("input_size", Ints(x.begin() + 2, x.end()));
  return {nested_call1("interpolate_backward", {c.grad_outputs[0]}, attrs)};
}

// interpolate_backward is linear in g, with interpolate as its adjoint.
std::vector<Tensor> interpolate_backward_gradient(const GradContext& c) {
  Attrs attrs = sampling(c.attrs);
  const Shape& g = c.inputs[0].shape();
  attrs.set("size", Ints(g.begin() + 2, g.end()));
  return {nested_call1("interpolate", {c.grad_outputs[0]}, attrs)};
}

}  // namespace

void register_interpolate_ops(Registry& registry) {
  registry.add({.name = "interpolate",
                .attrs = {required("size", Ints{}), optional("mode", std::string("nearest")),
                          optional("align_corners", false)},
                .infer = infer_interpolate,
                .cpu = interpolate_kernel,
                .gradient = interpolate_gradient,
                .doc = "x [N, C, spatial...] resized to size, nearest or (bi/tri)linear"});
  registry.add({.name = "interpolate_backward",
                .attrs = {required("input_size", Ints{}), required("mode", std::string()),
                          optional("align_corners", false)},
                .infer = infer_interpolate_backward,
                .cpu = interpolate_backward_kernel,
                .gradient = interpolate_backward_gradient,
                .doc = "interpolate's gradient: each output's gradient spread over what it read"});
}

}  // namespace tandem::kernels
