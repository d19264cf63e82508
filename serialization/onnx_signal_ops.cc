// ONNX's signal processing: the generators HannWindow, HammingWindow,
// BlackmanWindow and MelWeightMatrix, and the transforms DFT and STFT.
//
// The generators' output shapes are their inputs' values, so those must be
// known at import (constants, or inputs bound with
// OnnxImportOptions::known_inputs); the outputs are then constants,
// computed here in double precision and cast to the requested dtype, as
// ONNX's reference computes them.
//
// A DFT of length N is two matrix products with constant [N, K] cosine and
// sine matrices: O(N K) work per signal, against a fast transform's
// O(N log N), which for the short frames of audio front ends (a few hundred
// points) runs on the matmul kernel at full speed.
#include <cmath>
#include <numbers>
#include <optional>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"
#include "serialization/onnx_file.h"

#include "onnx/onnx_pb.h"

namespace tandem::serialization::onnx_convert {
namespace {

DType output_datatype(Node& n) {
  const auto code = static_cast<int32_t>(n.attr_int("output_datatype", onnx::TensorProto::FLOAT));
  const std::optional<DType> dtype = dtype_from_onnx(code);
  if (!dtype) n.refuse(str_cat("Tandem has no tensors of type ", onnx_type_name(code)));
  return *dtype;
}

OnnxValue host_constant(Node& n, const std::vector<double>& values, Shape shape, DType dtype) {
  return cast(n, n.constant(Tensor::from_vector<double>(values, std::move(shape))), dtype);
}

enum class WindowKind { kHann, kHamming, kBlackman };

// w[k] = a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N), with N the size
// (periodic) or the size less one (symmetric).
void convert_window(Node& n, WindowKind kind) {
  const int64_t size = known_count(n, 0, "size");
  const bool periodic = n.attr_int("periodic", 1) != 0;
  const double period = static_cast<double>(periodic ? size : size - 1);
  double a0 = 0.5, a1 = 0.5, a2 = 0;
  if (kind == WindowKind::kHamming) {
    a0 = 25.0 / 46.0;
    a1 = 1 - a0;
  } else if (kind == WindowKind::kBlackman) {
    a0 = 0.42;
    a2 = 0.08;
  }
  std::vector<double> w(static_cast<size_t>(size));
  for (size_t k = 0; k < w.size(); ++k) {
    const double angle = 2 * std::numbers::pi * static_cast<double>(k) / period;
    w[k] = a0 - a1 * std::cos(angle) + a2 * std::cos(2 * angle);
  }
  n.set_output(0, host_constant(n, w, Shape{size}, output_datatype(n)));
}

// Triangular filters, equally spaced on the mel scale between the two edge
// frequencies, over the dft_length / 2 + 1 bins of a one-sided spectrum:
// [bins, num_mel_bins]. The filters' corners are rounded down to bins as
// ONNX's reference rounds them.
void convert_mel_weight_matrix(Node& n) {
  const int64_t mels = known_count(n, 0, "num_mel_bins");
  const int64_t dft_length = known_count(n, 1, "dft_length");
  const int64_t sample_rate = known_count(n, 2, "sample_rate");
  const double low_hz = n.known_scalar(3, "lower_edge_hertz");
  const double high_hz = n.known_scalar(4, "upper_edge_hertz");
  if (sample_rate == 0) n.refuse("sample_rate is 0");
  if (!(low_hz >= 0 && low_hz <= high_hz && std::isfinite(high_hz))) {
    n.refuse(str_cat("the edges ", low_hz, " Hz to ", high_hz, " Hz are not an interval"));
  }
  const int64_t bins = dft_length / 2 + 1;
  check_host_count(n, checked_mul(bins, mels, "the mel weight matrix"), "the mel weight matrix");
  auto to_mel = [](double hz) { return 2595 * std::log1p(hz / 700) / std::log(10.0); };
  const double low_mel = to_mel(low_hz);
  const double step = (to_mel(high_hz) - low_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> corner(static_cast<size_t>(mels + 2));
  for (size_t i = 0; i < corner.size(); ++i) {
    const double mel = static_cast<double>(i) * step + low_mel;
    const double hz = 700 * std::expm1(mel / 2595 * std::log(10.0));
    corner[i] = static_cast<int64_t>(
        std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate)));
    if (corner[i] < 0 || corner[i] >= bins) {
      n.refuse(str_cat("filter corner ", i, " falls on bin ", corner[i], ", outside the ", bins,
                       " bins of a ", dft_length, "-point DFT"));
    }
  }
  std::vector<double> w(static_cast<size_t>(bins * mels), 0.0);
  auto at = [&](int64_t bin, int64_t mel) -> double& { return w[size_t(bin * mels + mel)]; };
  for (int64_t m = 0; m < mels; ++m) {
    const int64_t left = corner[size_t(m)], center = corner[size_t(m + 1)],
                  right = corner[size_t(m + 2)];
    if (center == left) {
      at(center, m) = 1;
    } else {
      for (int64_t b = left; b <= center; ++b) at(b, m) = double(b - left) / double(center - left);
    }
    for (int64_t b = center; b < right; ++b) at(b, m) = double(right - b) / double(right - center);
  }
  n.set_output(0, host_constant(n, w, Shape{bins, mels}, output_datatype(n)));
}

// A complex signal as its real and imaginary parts, each of x's shape less
// the last axis (of size 1: real, or 2: complex; a missing imaginary part is
// nothing).
struct Complex {
  OnnxValue re;
  std::optional<OnnxValue> im;
};

Complex parts_of(Node& n, const OnnxValue& x) {
  const Shape s = n.meta(x).shape;
  const int64_t last = s.rank() - 1;
  if (last < 1 || (s[int(last)] != 1 && s[int(last)] != 2)) {
    n.refuse(str_cat("the signal's last axis must hold 1 (real) or 2 (complex) values, shape ",
                     s.to_string()));
  }
  if (s[int(last)] == 1) return {slice_at(n, x, last, 0), std::nullopt};
  return {slice_at(n, x, last, 0), slice_at(n, x, last, 1)};
}

// [..., re/im] from the two parts.
OnnxValue complex_of(Node& n, const OnnxValue& re, const OnnxValue& im) {
  Ints dims = dims_of(n.meta(re).shape);
  dims.push_back(1);
  return n.op(kernels::concat_op(), {{"axis", int64_t(dims.size() - 1)}},
              {reshape(n, re, dims), reshape(n, im, dims)});
}

// `v` cut or zero-padded to `length` along `axis`.
OnnxValue fitted(Node& n, const OnnxValue& v, int64_t axis, int64_t length) {
  const Shape s = n.meta(v).shape;
  const int64_t have = s[int(axis)];
  if (have > length) {
    return sliced(n, v, axis, 0, length);
  }
  if (have == length) return v;
  Ints pads(size_t(2 * s.rank()), 0);
  pads[size_t(2 * axis + 1)] = length - have;
  return n.op(kernels::pad_op(), {{"pads", pads}, {"value", 0.0}}, {v});
}

// The DFT of the signal along `axis` of its parts: X[k] = sum_n x[n]
// e^(-+2 pi i k n / N), scaled by 1 / N when inverse; K = N / 2 + 1
// outputs when onesided, else N.
OnnxValue dft(Node& n, Complex x, int64_t axis, int64_t length, bool inverse, bool onesided) {
  if (length < 1) n.refuse(str_cat("the DFT length is ", length));
  const int64_t outputs = onesided ? length / 2 + 1 : length;
  check_host_count(n, checked_mul(length, outputs, "the DFT matrix"), "the DFT matrix");
  const DType dtype = n.meta(x.re).dtype;
  if (!is_floating_point(dtype)) n.refuse("the signal must be a float tensor");
  const int64_t rank = n.meta(x.re).shape.rank();
  // The signal axis last, as the rows of the matrices [N, K].
  Ints perm;
  for (int64_t a = 0; a < rank; ++a) {
    if (a != axis) perm.push_back(a);
  }
  perm.push_back(axis);
  Ints back(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) back[size_t(perm[i])] = int64_t(i);
  auto to_last = [&](const OnnxValue& v) {
    return n.op(kernels::transpose_op(), {{"perm", perm}}, {fitted(n, v, axis, length)});
  };
  std::vector<double> cosine(size_t(length * outputs)), sine(cosine.size());
  const double scale = inverse ? 1.0 / double(length) : 1.0;
  for (int64_t t = 0; t < length; ++t) {
    for (int64_t k = 0; k < outputs; ++k) {
      // (t k) mod N keeps the angle small, so that large N lose nothing.
      const double angle = 2 * std::numbers::pi * double((t * k) % length) / double(length);
      cosine[size_t(t * outputs + k)] = scale * std::cos(angle);
      sine[size_t(t * outputs + k)] = scale * std::sin(angle);
    }
  }
  const OnnxValue c = host_constant(n, cosine, Shape{length, outputs}, dtype);
  const OnnxValue s = host_constant(n, sine, Shape{length, outputs}, dtype);
  auto times = [&](const OnnxValue& v, const OnnxValue& m) {
    return n.op(kernels::matmul_op(), {}, {v, m});
  };
  // Forward: (a + ib)(cos - i sin) = a cos + b sin + i (b cos - a sin);
  // inverse: (a + ib)(cos + i sin) = a cos - b sin + i (b cos + a sin).
  const OnnxValue a = to_last(x.re);
  OnnxValue re = times(a, c), im = times(a, s);
  if (!inverse) im = ew1<ew::Neg>(n, im);
  if (x.im) {
    const OnnxValue b = to_last(*x.im);
    re = inverse ? ew2<ew::Sub>(n, re, times(b, s)) : ew2<ew::Add>(n, re, times(b, s));
    im = ew2<ew::Add>(n, im, times(b, c));
  }
  auto from_last = [&](const OnnxValue& v) {
    return n.op(kernels::transpose_op(), {{"perm", back}}, {v});
  };
  return complex_of(n, from_last(re), from_last(im));
}

void convert_dft(Node& n) {
  if (n.opset() >= 20) n.refuse("DFT of opset 20 (axis as an input) is not supported");
  const OnnxValue x = n.input(0);
  const int64_t rank = n.shape(0).rank();
  // The axis counts x's axes; the last holds re/im and cannot be one.
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 1), rank);
  if (axis == rank - 1) n.refuse("axis is the re/im axis");
  const bool inverse = n.attr_int("inverse", 0) != 0, onesided = n.attr_int("onesided", 0) != 0;
  const Complex parts = parts_of(n, x);
  if (onesided && (inverse || parts.im)) {
    n.refuse("onesided applies to the forward DFT of a real signal only");
  }
  const int64_t length = n.has_input(1) ? known_count(n, 1, "dft_length") : n.shape(0)[int(axis)];
  n.set_output(0, dft(n, parts, axis, length, inverse, onesided));
}

// Frames of frame_length values every frame_step values, each multiplied by
// the window and transformed: [batch, frames, bins, 2].
void convert_stft(Node& n) {
  const OnnxValue signal = n.input(0);
  const Shape s = n.shape(0);
  if (s.rank() != 3)
    n.refuse(str_cat("the signal must be [batch, length, 1 or 2], not ", s.to_string()));
  const int64_t step = known_count(n, 1, "frame_step");
  if (step == 0) n.refuse("frame_step is 0");
  std::optional<OnnxValue> window;
  if (n.has_input(2)) window = n.input(2);
  int64_t length = 0;
  if (n.has_input(3)) {
    length = known_count(n, 3, "frame_length");
    if (window && n.meta(*window).shape != Shape{length}) {
      n.refuse("the window's length is not frame_length");
    }
  } else if (window) {
    if (n.meta(*window).shape.rank() != 1) n.refuse("the window must be 1-D");
    length = n.meta(*window).shape[0];
  } else {
    n.refuse("neither a window nor frame_length gives the frame length");
  }
  if (length < 1 || length > s[1]) {
    n.refuse(str_cat("frame length ", length, " does not fit a signal of ", s[1]));
  }
  const int64_t frames = (s[1] - length) / step + 1;
  check_host_count(n, checked_mul(frames, length, "the frames"), "the frames");
  Ints starts;
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t t = 0; t < length; ++t) starts.push_back(f * step + t);
  }
  // [batch, frames, length, 1 or 2]
  OnnxValue framed =
      n.op(kernels::take_op(), {{"axis", int64_t{1}}},
           {signal, n.constant(Tensor::from_vector<int64_t>(starts, Shape{frames, length}))});
  if (window) {
    framed = ew2<ew::Mul>(n, framed,
                          reshape(n, cast(n, *window, n.meta(framed).dtype), {1, 1, length, 1}));
  }
  const Complex parts = parts_of(n, framed);
  const bool onesided = n.attr_int("onesided", 1) != 0;
  if (onesided && parts.im) n.refuse("onesided applies to a real signal only");
  n.set_output(0, dft(n, parts, 2, length, false, onesided));
}

}  // namespace

void add_signal_converters(ConverterTable& table) {
  table.insert({
      {"HannWindow", [](Node& n) { convert_window(n, WindowKind::kHann); }},
      {"HammingWindow", [](Node& n) { convert_window(n, WindowKind::kHamming); }},
      {"BlackmanWindow", [](Node& n) { convert_window(n, WindowKind::kBlackman); }},
      {"MelWeightMatrix", convert_mel_weight_matrix},
      {"DFT", convert_dft},
      {"STFT", convert_stft},
  });
}

}  // namespace tandem::serialization::onnx_convert
