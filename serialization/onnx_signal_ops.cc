// ONNX's signal-processing generators: HannWindow, HammingWindow,
// BlackmanWindow and MelWeightMatrix.
//
// Their outputs' shapes are their inputs' values, so those must be known at
// import (constants, or inputs bound with OnnxImportOptions::known_inputs);
// the outputs are then constants, computed here in double precision and
// cast to the requested dtype, as ONNX's reference computes them.
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
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

// A non-negative integer input, known at import, bounded by what the
// importer computes on the host.
int64_t known_count(Node& n, size_t i, std::string_view what) {
  const int64_t v = integral(n, n.known_scalar(i, what), what);
  if (v < 0) n.refuse(str_cat(what, " is negative (", v, ")"));
  check_host_count(n, v, what);
  return v;
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

}  // namespace

void add_signal_converters(ConverterTable& table) {
  table.insert({
      {"HannWindow", [](Node& n) { convert_window(n, WindowKind::kHann); }},
      {"HammingWindow", [](Node& n) { convert_window(n, WindowKind::kHamming); }},
      {"BlackmanWindow", [](Node& n) { convert_window(n, WindowKind::kBlackman); }},
      {"MelWeightMatrix", convert_mel_weight_matrix},
  });
}

}  // namespace tandem::serialization::onnx_convert
