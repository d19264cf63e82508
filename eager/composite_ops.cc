#include "eager/composite_ops.h"

#include <limits>
#include <set>
#include <vector>

#include "core/error.h"

namespace tandem {
namespace {

// `axis` of x in [0, rank), or an Error naming `op`.
int axis_of(const Tensor& x, int64_t axis, const char* op) {
  TANDEM_CHECK(axis >= -x.rank() && axis < x.rank(), op, ": axis ", axis,
               " is out of range for shape ", x.shape().to_string());
  return static_cast<int>(axis < 0 ? axis + x.rank() : axis);
}

// Whether j - i <= diagonal (lower) or >= diagonal (upper), as a bool
// [rows, cols] tensor.
Tensor triangle_mask(int64_t rows, int64_t cols, int64_t diagonal, bool lower, Device device,
                     std::source_location site) {
  Tensor i = reshape(arange(0, static_cast<double>(rows), 1, DType::kInt64, device, site),
                     {rows, 1}, site);
  Tensor j = arange(0, static_cast<double>(cols), 1, DType::kInt64, device, site);
  // j - i <= diagonal  <=>  j <= i + diagonal.
  Tensor shifted =
      add(i, full({}, static_cast<double>(diagonal), DType::kInt64, device, site), site);
  return lower ? le(j, shifted, site) : ge(j, shifted, site);
}

// The lower (tril) or upper (triu) triangle of x's last two axes.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op,
                std::source_location site) {
  TANDEM_CHECK(x.rank() >= 2, op, " needs at least two axes, got shape ", x.shape().to_string());
  Tensor keep =
      triangle_mask(x.shape().dim(-2), x.shape().dim(-1), diagonal, lower, x.device(), site);
  return where(keep, x, full({}, 0.0, x.dtype(), x.device(), site), site);
}

}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, std::source_location site) {
  TANDEM_CHECK(mask.dtype() == DType::kBool, "masked_fill: the mask must be bool, got ",
               dtype_name(mask.dtype()), " (x ", x.shape().to_string(), ")");
  return where(mask, full({}, value, x.dtype(), x.device(), site), x, site);
}

Tensor logsumexp(const Tensor& x, const Dims& axes, bool keepdims, std::source_location site) {
  // The maximum, with 0 where it is infinite: a row of -inf would give
  // -inf - -inf = NaN, a row with +inf gives +inf either way. Detached, as
  // torch does: its gradient cancels out exactly, and would only add
  // rounding.
  Tensor top = max(x, axes, /*keepdims=*/true, site).detach();
  Tensor zero = full({}, 0.0, x.dtype(), x.device(), site);
  Tensor shift = where(isinf(top, site), zero, top, site);
  Tensor total = sum(exp(sub(x, shift, site), site), axes, keepdims, site);
  // sum over the reduced axes of size 1 drops them without a reshape.
  Tensor shift_out = keepdims ? shift : sum(shift, axes, /*keepdims=*/false, site);
  return add(log(total, site), shift_out, site);
}

Tensor tril_mask(int64_t rows, int64_t cols, int64_t diagonal, Device device,
                 std::source_location site) {
  return triangle_mask(rows, cols, diagonal, /*lower=*/true, device, site);
}

Tensor tril(const Tensor& x, int64_t diagonal, std::source_location site) {
  return triangle(x, diagonal, /*lower=*/true, "tril", site);
}

Tensor triu(const Tensor& x, int64_t diagonal, std::source_location site) {
  return triangle(x, diagonal, /*lower=*/false, "triu", site);
}

Tensor flip(const Tensor& x, const Dims& axes, std::source_location site) {
  std::set<int> seen;
  Tensor y = x;
  for (int64_t a : axes) {
    const int axis = axis_of(x, a, "flip");
    TANDEM_CHECK(seen.insert(axis).second, "flip: axis ", a, " is listed twice for shape ",
                 x.shape().to_string());
    const double n = static_cast<double>(x.shape()[axis]);
    y = take(y, arange(n - 1, -1, -1, DType::kInt64, x.device(), site), axis, site);
  }
  return y;
}

Tensor roll(const Tensor& x, int64_t shift, int64_t axis, std::source_location site) {
  const int a = axis_of(x, axis, "roll");
  const int64_t n = x.shape()[a];
  if (n == 0) return x;
  const int64_t s = ((shift % n) + n) % n;  // In [0, n), for any shift.
  if (s == 0) return x;
  return concat({slice(x, a, n - s, n, 1, site), slice(x, a, 0, n - s, 1, site)}, a, site);
}

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Dims& kernel, const Dims& stride,
                    const Dims& padding, const Dims& output_size, std::source_location site) {
  TANDEM_CHECK(x.rank() == 4, "max_unpool2d: x must be [N, C, h, w], got ", x.shape().to_string());
  TANDEM_CHECK(indices.dtype() == DType::kInt64 && indices.shape() == x.shape(),
               "max_unpool2d: indices must be int64 of x's shape ", x.shape().to_string(), ", got ",
               dtype_name(indices.dtype()), " ", indices.shape().to_string());
  TANDEM_CHECK(kernel.size() == 2 && (stride.empty() || stride.size() == 2) &&
                   padding.size() == 2 && (output_size.empty() || output_size.size() == 2),
               "max_unpool2d: kernel, stride, padding and output_size take two values each "
               "(stride and output_size may be empty)");
  Dims size = output_size;
  for (size_t a = 0; size.size() < 2; ++a) {
    const int64_t step = stride.empty() ? kernel[a] : stride[a];
    const auto what = [&] { return str_cat("max_unpool2d's output size along axis ", a + 2); };
    size.push_back(checked_add(checked_sub(checked_mul(x.shape()[a + 2] - 1, step, what()),
                                           checked_mul(2, padding[a], what()), what()),
                               kernel[a], what()));
  }
  TANDEM_CHECK(size[0] > 0 && size[1] > 0, "max_unpool2d: the output size [", size[0], ", ",
               size[1], "] must be positive (x ", x.shape().to_string(), ")");
  const int64_t n = x.shape()[0], c = x.shape()[1], count = x.shape()[2] * x.shape()[3];
  const int64_t plane = checked_mul(size[0], size[1], "max_unpool2d's output plane");
  Tensor flat =
      scatter(zeros({n, c, plane}, x.dtype(), x.device(), site),
              reshape(indices, {n, c, count}, site), reshape(x, {n, c, count}, site), 2, site);
  return reshape(flat, {n, c, size[0], size[1]}, site);
}

Tensor tile(const Tensor& x, const Dims& reps, std::source_location site) {
  TANDEM_CHECK(static_cast<int>(reps.size()) == x.rank(), "tile: reps has ", reps.size(),
               " entries, x has shape ", x.shape().to_string(), " (one per axis)");
  Tensor y = x;
  for (int axis = 0; axis < x.rank(); ++axis) {
    const int64_t r = reps[static_cast<size_t>(axis)];
    TANDEM_CHECK(
        r >= 1 && r <= std::numeric_limits<int32_t>::max() / std::max<int64_t>(1, x.shape()[axis]),
        "tile: reps[", axis, "] = ", r, " must be >= 1 and keep the axis in range (x ",
        x.shape().to_string(), ")");
    if (r > 1) y = concat(std::vector<Tensor>(static_cast<size_t>(r), y), axis, site);
  }
  return y;
}

namespace {

// [N, C, L] as [N, C, 1, L]; the weight [a, b, k] as [a, b, 1, k].
Tensor with_unit_height(const Tensor& t, std::source_location site) {
  const Shape& s = t.shape();
  return reshape(t, {s[0], s[1], 1, s[2]}, site);
}

Tensor without_height(const Tensor& t, std::source_location site) {
  const Shape& s = t.shape();
  return reshape(t, {s[0], s[1], s[3]}, site);
}

void check_1d(const char* function, const Tensor& x, const Tensor& weight, const char* layout) {
  TANDEM_CHECK(x.rank() == 3, function, ": x must be [N, C, L], got ", x.shape().to_string());
  TANDEM_CHECK(weight.rank() == 3, function, ": weight must be ", layout, ", got ",
               weight.shape().to_string());
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups, std::source_location site) {
  check_1d("conv1d", x, weight, "[out, in / groups, k]");
  return without_height(conv2d(with_unit_height(x, site), with_unit_height(weight, site), bias,
                               {1, stride}, {0, padding}, {1, dilation}, groups, site),
                        site);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                        int64_t padding, int64_t output_padding, int64_t groups, int64_t dilation,
                        std::source_location site) {
  check_1d("conv_transpose1d", x, weight, "[in, out / groups, k]");
  return without_height(
      conv_transpose2d(with_unit_height(x, site), with_unit_height(weight, site), bias, {1, stride},
                       {0, padding}, {0, output_padding}, groups, {1, dilation}, site),
      site);
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Dims& stride,
              const Dims& padding, const Dims& dilation, int64_t groups,
              std::source_location site) {
  TANDEM_CHECK(x.rank() == 5, "conv3d: x must be [N, C, D, H, W], got ", x.shape().to_string());
  TANDEM_CHECK(weight.rank() == 5, "conv3d: weight must be [out, in / groups, kD, kH, kW], got ",
               weight.shape().to_string());
  TANDEM_CHECK(stride.size() == 3 && padding.size() == 3 && dilation.size() == 3,
               "conv3d: stride, padding and dilation take (depth, height, width)");
  const auto text = [](const Dims& d) { return str_cat("[", d[0], ", ", d[1], ", ", d[2], "]"); };
  for (size_t a = 0; a < 3; ++a) {
    TANDEM_CHECK(stride[a] > 0 && dilation[a] > 0 && padding[a] >= 0,
                 "conv3d: stride and dilation must be positive and padding non-negative, got "
                 "stride ",
                 text(stride), ", dilation ", text(dilation), ", padding ", text(padding));
  }
  const Shape &xs = x.shape(), &ws = weight.shape();
  const int64_t n = xs[0], c = xs[1], depth = xs[2], out = ws[0], kd = ws[2];
  TANDEM_CHECK(
      groups >= 1 && c % groups == 0 && checked_mul(ws[1], groups, "conv3d's channels") == c,
      "conv3d: weight of shape ", ws.to_string(), " and groups = ", groups,
      " do not fit x of shape ", xs.to_string(), " (in = weight[1] * groups)");
  TANDEM_CHECK(kd >= 1, "conv3d: the kernel of weight ", ws.to_string(), " has no depth");
  // The depth sweep, as conv2d's per axis (checked: the attributes may be anything).
  const auto what = [&] { return str_cat("conv3d's depth for x ", xs.to_string()); };
  const int64_t extent = checked_add(checked_mul(dilation[0], kd - 1, what()), 1, what());
  const int64_t padded = checked_add(depth, checked_mul(2, padding[0], what()), what());
  TANDEM_CHECK(extent <= padded, "conv3d: the dilated kernel depth (", extent,
               ") is larger than the padded input depth (", depth, " + 2 * ", padding[0],
               ") of x of shape ", xs.to_string());
  const int64_t out_depth = (padded - extent) / stride[0] + 1;
  const int64_t stacked = checked_mul(c, kd, "conv3d's stacked channels");

  // The depth taps' slices, each [N, C, D', H, W], stacked to [N, kD, C,
  // D', H, W], then ordered [N, D', groups, kD, C / groups, H, W] so that
  // conv2d's group j reads its own channels of every tap.
  const Tensor padded_x =
      padding[0] > 0 ? pad(x, {0, 0, 0, 0, padding[0], padding[0], 0, 0, 0, 0}, 0.0, site) : x;
  std::vector<Tensor> taps;
  for (int64_t i = 0; i < kd; ++i) {
    const int64_t begin = i * dilation[0];
    taps.push_back(
        slice(padded_x, 2, begin, begin + (out_depth - 1) * stride[0] + 1, stride[0], site));
  }
  const int64_t h = xs[3], w = xs[4], per_group = c / groups;
  Tensor planes = reshape(stack(taps, 1, site), {n, kd, groups, per_group, out_depth, h, w}, site);
  planes =
      reshape(transpose(planes, {0, 4, 2, 1, 3, 5, 6}, site), {n * out_depth, stacked, h, w}, site);
  // The weight [out, C / groups, kD, kH, kW] as [out, kD * C / groups, kH, kW].
  const Tensor kernel =
      reshape(transpose(weight, {0, 2, 1, 3, 4}, site), {out, kd * per_group, ws[3], ws[4]}, site);
  const Tensor y = conv2d(planes, kernel, bias, {stride[1], stride[2]}, {padding[1], padding[2]},
                          {dilation[1], dilation[2]}, groups, site);
  // [N * D', out, H', W'] -> [N, out, D', H', W'].
  const Shape& ys = y.shape();
  return transpose(reshape(y, {n, out_depth, out, ys[2], ys[3]}, site), {0, 2, 1, 3, 4}, site);
}

}  // namespace tandem
