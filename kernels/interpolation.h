// The sampling of the "interpolate" op (kernels/ops/interpolate.cc), shared
// with its CUDA kernel: which input positions, with which weights, each
// output position of a resized axis reads.
#pragma once

#include <cstdint>

#include "kernels/attrs.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

enum class InterpolationMode { kNearest, kLinear };

// The op's "mode" attribute; an unknown name is an Error listing the modes.
InterpolationMode interpolation_mode(const Attrs& attrs);

// Output position `o` of an axis resized from `in` to `out` positions reads
// (1 - weight) * x[low] + weight * x[high].
struct AxisSample {
  int64_t low;
  int64_t high;
  double weight;
};

// Note [Interpolation coordinates], as torch's F.interpolate with a size:
// - nearest: low = floor(o * in / out), in exact integer arithmetic (torch
//   rounds a float32 scale, which can pick the neighbour at large sizes).
// - linear, align_corners: the corner centers line up,
//   s = o * (in - 1) / (out - 1) (0 when out = 1).
// - linear, not align_corners: the pixel areas line up,
//   s = max((o + 0.5) * in / out - 0.5, 0) (ONNX Resize's half_pixel).
// Then low = floor(s), high = min(low + 1, in - 1), weight = s - low.
TANDEM_HOST_DEVICE inline AxisSample axis_sample(InterpolationMode mode, bool align_corners,
                                                 int64_t o, int64_t in, int64_t out) {
  if (mode == InterpolationMode::kNearest) {
    const int64_t low = o * in / out;
    return {low, low, 0.0};
  }
  double s = 0;
  if (align_corners) {
    s = out > 1
            ? static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(out - 1)
            : 0.0;
  } else {
    s = (static_cast<double>(o) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
    s = s < 0 ? 0.0 : s;
  }
  int64_t low = static_cast<int64_t>(s);  // s >= 0: truncation is floor.
  low = low < in - 1 ? low : in - 1;
  const int64_t high = low + 1 < in ? low + 1 : in - 1;
  return {low, high, s - static_cast<double>(low)};
}

}  // namespace tandem::kernels
