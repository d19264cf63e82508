// Rows for conv_pool.cc (conv2d, max/avg/adaptive pooling and their backward
// ops) and its error messages.
//
// References: a direct convolution and direct pooling loops in double. The
// backward ops of the linear maps (conv data/weight, avg pooling, adaptive
// pooling) are checked against the adjoint of the forward reference, built
// column by column from unit inputs: <ref(e_i), grad_y> is entry i of the
// gradient. max pooling's backward scatters to the reference's argmax.
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

struct ConvParams {
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  Attrs attrs() const {
    return {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}};
  }
};

// y[n, o, i, j] = b[o] + sum_{c in o's group, ky, kx} x[n, c, i s - p + ky d, ...] w[o, c', ky,
// kx].
std::vector<double> conv_values(const std::vector<double>& x, const Shape& xs,
                                const std::vector<double>& w, const Shape& ws,
                                const std::vector<double>& b, const ConvParams& p, Shape* out) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], cg = ws[1], kh = ws[2],
                kw = ws[3];
  const int64_t oh = (h + 2 * p.padding[0] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
  const int64_t ow = (wd + 2 * p.padding[1] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
  *out = Shape{n, o, oh, ow};
  std::vector<double> y(out->numel());
  const int64_t og = o / p.groups;
  for (int64_t in = 0; in < n; ++in) {
    for (int64_t oc = 0; oc < o; ++oc) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          double sum = b[oc];
          for (int64_t cc = 0; cc < cg; ++cc) {
            int64_t channel = (oc / og) * cg + cc;
            for (int64_t ky = 0; ky < kh; ++ky) {
              for (int64_t kx = 0; kx < kw; ++kx) {
                int64_t yy = i * p.stride[0] - p.padding[0] + ky * p.dilation[0];
                int64_t xx = j * p.stride[1] - p.padding[1] + kx * p.dilation[1];
                if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;
                sum += x[((in * c + channel) * h + yy) * wd + xx] *
                       w[((oc * cg + cc) * kh + ky) * kw + kx];
              }
            }
          }
          y[((in * o + oc) * oh + i) * ow + j] = sum;
        }
      }
    }
  }
  return y;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Entry i of the adjoint of the linear map f, applied to g: <f(e_i), g>.
std::vector<double> adjoint(int64_t size,
                            const std::function<std::vector<double>(const std::vector<double>&)>& f,
                            const std::vector<double>& g) {
  std::vector<double> out(size);
  for (int64_t i = 0; i < size; ++i) {
    std::vector<double> unit(size, 0.0);
    unit[i] = 1;
    out[i] = dot(f(unit), g);
  }
  return out;
}

OpTestCase conv_row(std::string name, Shape x, Shape w, ConvParams p) {
  return {.name = std::move(name),
          .op = "conv2d",
          .inputs = {random_tensor(x, 1), random_tensor(w, 2), random_tensor({w[0]}, 3)},
          .attrs = p.attrs(),
          .reference = [p](const Inputs& in) {
            Shape out;
            std::vector<double> y = conv_values(values_of(in[0]), in[0].shape(), values_of(in[1]),
                                                in[1].shape(), values_of(in[2]), p, &out);
            return std::vector{result(y, out, in[0].dtype())};
          }};
}

std::vector<int64_t> dims(const Shape& s) { return {s.begin(), s.end()}; }

Shape conv_out(const Shape& x, const Shape& w, const ConvParams& p) {
  Shape out;
  conv_values(std::vector<double>(x.numel()), x, std::vector<double>(w.numel()), w,
              std::vector<double>(w[0]), p, &out);
  return out;
}

OpTestCase conv_backward_data_row(std::string name, Shape x, Shape w, ConvParams p) {
  Attrs attrs = p.attrs();
  attrs.set("input_shape", dims(x));
  return {.name = std::move(name),
          .op = "conv2d_backward_data",
          .inputs = {random_tensor(conv_out(x, w, p), 4), random_tensor(w, 5)},
          .attrs = attrs,
          .reference = [x, p](const Inputs& in) {
            std::vector<double> wv = values_of(in[1]), bias(in[1].shape()[0], 0.0);
            Shape out;
            auto f = [&](const std::vector<double>& xv) {
              return conv_values(xv, x, wv, in[1].shape(), bias, p, &out);
            };
            return std::vector{result(adjoint(x.numel(), f, values_of(in[0])), x, in[0].dtype())};
          }};
}

OpTestCase conv_backward_weight_row(std::string name, Shape x, Shape w, ConvParams p) {
  Attrs attrs = p.attrs();
  attrs.set("weight_shape", dims(w));
  return {.name = std::move(name),
          .op = "conv2d_backward_weight",
          .inputs = {random_tensor(x, 6), random_tensor(conv_out(x, w, p), 7)},
          .attrs = attrs,
          .reference = [w, p](const Inputs& in) {
            std::vector<double> xv = values_of(in[0]), g = values_of(in[1]);
            std::vector<double> zero_w(w.numel(), 0.0), zero_b(w[0], 0.0);
            Shape out;
            auto f_w = [&](const std::vector<double>& wv) {
              return conv_values(xv, in[0].shape(), wv, w, zero_b, p, &out);
            };
            auto f_b = [&](const std::vector<double>& bv) {
              return conv_values(xv, in[0].shape(), zero_w, w, bv, p, &out);
            };
            return std::vector{result(adjoint(w.numel(), f_w, g), w, in[0].dtype()),
                               result(adjoint(w[0], f_b, g), Shape{w[0]}, in[0].dtype())};
          }};
}

// Pooling references. kind: "max", "avg" (divides by kh * kw) or "adaptive".
struct PoolParams {
  std::vector<int64_t> kernel{}, stride{}, padding{0, 0};
  std::vector<int64_t> dilation{};  // Max pooling's; empty: none given (1).
  Attrs attrs() const {
    Attrs a{{"kernel", kernel}, {"padding", padding}};
    if (!stride.empty()) a.set("stride", stride);
    if (!dilation.empty()) a.set("dilation", dilation);
    return a;
  }
  int64_t dilation_at(int axis) const { return dilation.empty() ? 1 : dilation[axis]; }
};

// Output values and, for max, the flat input index of each window's first maximum.
std::vector<double> pool_values(const std::string& kind, const std::vector<double>& x,
                                const Shape& xs, const PoolParams& p, Shape* out,
                                std::vector<int64_t>* argmax = nullptr) {
  const int64_t planes = xs[0] * xs[1], h = xs[2], w = xs[3];
  std::vector<int64_t> stride = p.stride.empty() ? p.kernel : p.stride;
  const int64_t d0 = p.dilation_at(0), d1 = p.dilation_at(1);
  const int64_t oh = kind == "adaptive"
                         ? p.kernel[0]
                         : (h + 2 * p.padding[0] - d0 * (p.kernel[0] - 1) - 1) / stride[0] + 1;
  const int64_t ow = kind == "adaptive"
                         ? p.kernel[1]
                         : (w + 2 * p.padding[1] - d1 * (p.kernel[1] - 1) - 1) / stride[1] + 1;
  *out = Shape{xs[0], xs[1], oh, ow};
  std::vector<double> y;
  for (int64_t pl = 0; pl < planes; ++pl) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        int64_t y0, y1, x0, x1, dy = 1, dx = 1;  // Window [y0, y1) every dy, ...
        if (kind == "adaptive") {
          y0 = static_cast<int64_t>(std::floor(static_cast<double>(i * h) / oh));
          y1 = static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * h) / oh));
          x0 = static_cast<int64_t>(std::floor(static_cast<double>(j * w) / ow));
          x1 = static_cast<int64_t>(std::ceil(static_cast<double>((j + 1) * w) / ow));
        } else {
          y0 = i * stride[0] - p.padding[0];
          y1 = y0 + p.kernel[0] * d0;
          x0 = j * stride[1] - p.padding[1];
          x1 = x0 + p.kernel[1] * d1;
          dy = d0, dx = d1;
        }
        double best = -INFINITY, sum = 0;
        int64_t best_index = -1, count = 0;
        for (int64_t yy = y0; yy < y1; yy += dy) {
          for (int64_t xx = x0; xx < x1; xx += dx) {
            if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
            int64_t index = (pl * h + yy) * w + xx;
            if (x[index] > best) best = x[index], best_index = index;
            sum += x[index];
            ++count;
          }
        }
        if (argmax) argmax->push_back(best_index);
        if (kind == "max") y.push_back(best);
        if (kind == "avg") y.push_back(sum / static_cast<double>(p.kernel[0] * p.kernel[1]));
        if (kind == "adaptive") y.push_back(sum / static_cast<double>(count));
      }
    }
  }
  return y;
}

OpTestCase pool_row(std::string kind, std::string name, Shape x, PoolParams p) {
  OpTestCase row{.name = std::move(name),
                 .op = kind == "adaptive" ? "adaptive_avg_pool2d" : kind + "_pool2d",
                 .inputs = {random_tensor(x, 8)},
                 .attrs = p.attrs(),
                 .reference = [kind, p](const Inputs& in) {
                   Shape out;
                   std::vector<double> y =
                       pool_values(kind, values_of(in[0]), in[0].shape(), p, &out);
                   return std::vector{result(y, out, in[0].dtype())};
                 }};
  if (kind == "adaptive") row.attrs = Attrs{{"output_size", p.kernel}};
  return row;
}

OpTestCase pool_backward_row(std::string kind, std::string name, Shape x, PoolParams p) {
  Shape out;
  pool_values(kind, std::vector<double>(x.numel()), x, p, &out);
  OpTestCase row{
      .name = std::move(name),
      .op = kind == "adaptive" ? "adaptive_avg_pool2d_backward" : kind + "_pool2d_backward",
      .inputs = {random_tensor(out, 9)},
      .attrs = p.attrs(),
      .reference = [kind, p, x](const Inputs& in) {
        const Tensor& g = in.back();
        Shape out;
        if (kind == "max") {
          std::vector<int64_t> argmax;
          pool_values(kind, values_of(in[0]), x, p, &out, &argmax);
          std::vector<double> gx(x.numel(), 0.0), gv = values_of(g);
          for (size_t i = 0; i < argmax.size(); ++i) gx[argmax[i]] += gv[i];
          return std::vector{result(gx, x, g.dtype())};
        }
        auto f = [&](const std::vector<double>& xv) { return pool_values(kind, xv, x, p, &out); };
        return std::vector{result(adjoint(x.numel(), f, values_of(g)), x, g.dtype())};
      }};
  if (kind == "max") {
    row.inputs.insert(row.inputs.begin(), random_tensor(x, 10));
  } else {
    if (kind == "adaptive") row.attrs = Attrs{};
    row.attrs.set("input_shape", dims(x));
  }
  return row;
}

// The transposed convolution by its definition, a scatter: each x[n, c, i,
// j] adds x * w[c, o', ky, kx] to y[n, group(c) * O/g + o', i s - p + ky d,
// j s - p + kx d], on top of the bias.
OpTestCase conv_transpose_row(std::string name, Shape x, Shape w, ConvParams p,
                              std::vector<int64_t> output_padding) {
  Attrs attrs = p.attrs();
  attrs.set("output_padding", output_padding);
  const int64_t out_channels = w[1] * p.groups;
  return {.name = std::move(name),
          .op = "conv_transpose2d",
          .inputs = {random_tensor(x, 6), random_tensor(w, 7), random_tensor({out_channels}, 8)},
          .attrs = attrs,
          .reference = [p, output_padding](const Inputs& in) {
            const Shape &xs = in[0].shape(), &ws = in[1].shape();
            const std::vector<double> xv = values_of(in[0]), wv = values_of(in[1]),
                                      bv = values_of(in[2]);
            const int64_t n = xs[0], c = xs[1], og = ws[1], o = og * p.groups, cg = c / p.groups;
            int64_t size[2];
            for (int k = 0; k < 2; ++k) {
              size[k] = (xs[k + 2] - 1) * p.stride[k] - 2 * p.padding[k] +
                        p.dilation[k] * (ws[k + 2] - 1) + output_padding[k] + 1;
            }
            Shape out{n, o, size[0], size[1]};
            std::vector<double> y(out.numel());
            for (int64_t i = 0; i < out.numel(); ++i) y[i] = bv[(i / (size[0] * size[1])) % o];
            for_each_index(xs, [&](const Index& at) {
              for (int64_t oo = 0; oo < og; ++oo) {
                for (int64_t ky = 0; ky < ws[2]; ++ky) {
                  for (int64_t kx = 0; kx < ws[3]; ++kx) {
                    const int64_t yy = at[2] * p.stride[0] - p.padding[0] + ky * p.dilation[0];
                    const int64_t xx = at[3] * p.stride[1] - p.padding[1] + kx * p.dilation[1];
                    if (yy < 0 || yy >= size[0] || xx < 0 || xx >= size[1]) continue;
                    const int64_t oc = (at[1] / cg) * og + oo;
                    y[((at[0] * o + oc) * size[0] + yy) * size[1] + xx] +=
                        xv[((at[0] * c + at[1]) * xs[2] + at[2]) * xs[3] + at[3]] *
                        wv[((at[1] * og + oo) * ws[2] + ky) * ws[3] + kx];
                  }
                }
              }
            });
            return std::vector{result(y, out, in[0].dtype())};
          }};
}

TANDEM_OP_TEST_ROWS(conv_pool) {
  std::vector<OpTestCase> rows;
  struct ConvCase {
    const char* name;
    Shape x, w;
    ConvParams p;
  };
  std::vector<ConvCase> convs = {
      {"basic", {1, 2, 5, 5}, {3, 2, 3, 3}, {}},
      {"stride_padding", {2, 2, 5, 4}, {2, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 1}}},
      {"dilation", {1, 1, 6, 6}, {2, 1, 2, 2}, {.padding = {1, 0}, .dilation = {2, 2}}},
      {"groups", {1, 4, 4, 4}, {4, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {"depthwise_stride", {1, 3, 5, 5}, {3, 1, 2, 2}, {.stride = {2, 2}, .groups = 3}},
      {"one_by_one", {2, 3, 2, 3}, {2, 3, 1, 1}, {}},
  };
  for (const ConvCase& c : convs) {
    add_both(rows, conv_row(c.name, c.x, c.w, c.p));
    add_both(rows, conv_backward_data_row(c.name, c.x, c.w, c.p));
    add_both(rows, conv_backward_weight_row(c.name, c.x, c.w, c.p));
  }
  // Transposed convolutions: x [N, C, H, W], weight [C, O / groups, kH, kW].
  add_both(rows, conv_transpose_row("basic", {1, 2, 3, 3}, {2, 3, 3, 3}, {}, {0, 0}));
  add_both(rows, conv_transpose_row("stride_output_padding", {2, 2, 3, 4}, {2, 2, 3, 2},
                                    {.stride = {2, 3}, .padding = {1, 0}}, {1, 2}));
  add_both(rows,
           conv_transpose_row(
               "dilation_groups", {1, 4, 3, 3}, {4, 1, 2, 2},
               {.stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}, .groups = 2}, {0, 1}));
  rows.push_back(conv_transpose_row("large_f32", {2, 8, 6, 6}, {8, 16, 3, 3},
                                    {.stride = {2, 2}, .padding = {1, 1}}, {1, 1}));
  for (Tensor& t : rows.back().inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
  rows.back().tolerance = 1e-5;
  rows.back().check_gradient = false;
  // Shapes where oneDNN picks an optimized kernel: backward data takes the
  // blocked layouts from half a block of channels (4 on AVX2, so both rows
  // there; 8 on AVX-512, the eight-channel rows), backward weights always
  // (Note [Blocked layouts] in kernels/cpu/onednn.h).
  rows.push_back(conv_row("large_f32", {2, 8, 12, 12}, {16, 8, 3, 3}, {.padding = {1, 1}}));
  // (The backward references take one forward pass per element: small images.)
  rows.push_back(conv_backward_data_row("eight_channels_f32", {1, 8, 6, 6}, {16, 8, 3, 3}, {}));
  rows.push_back(conv_backward_weight_row("eight_channels_f32", {1, 8, 6, 6}, {16, 8, 3, 3}, {}));
  rows.push_back(conv_backward_data_row("six_channels_f32", {1, 6, 7, 7}, {8, 6, 5, 5}, {}));
  rows.push_back(conv_backward_weight_row("six_channels_f32", {1, 6, 7, 7}, {8, 6, 5, 5}, {}));
  for (size_t k = rows.size() - 5; k < rows.size(); ++k) {
    for (Tensor& t : rows[k].inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
    rows[k].tolerance = 1e-5;
    rows[k].check_gradient = false;
  }
  // Fused activations: float64 runs the plain loops, float32 oneDNN's post-op.
  for (const ActivationCase& a : fused_activations()) {
    add_both(rows, activated(conv_row("stride_padding", {2, 2, 5, 4}, {2, 2, 3, 3},
                                      {.stride = {2, 1}, .padding = {1, 1}}),
                             a));
    rows.push_back(
        activated(conv_row("large_f32", {2, 8, 12, 12}, {16, 8, 3, 3}, {.padding = {1, 1}}), a));
    for (Tensor& t : rows.back().inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
    rows.back().tolerance = 1e-5;
  }

  struct PoolCase {
    const char* name;
    Shape x;
    PoolParams p;
  };
  std::vector<PoolCase> pools = {
      {"2x2", {1, 2, 4, 4}, {.kernel = {2, 2}}},
      {"2x2_odd_sides", {1, 1, 5, 7}, {.kernel = {2, 2}}},
      {"3x2_stride_1x2", {1, 2, 5, 6}, {.kernel = {3, 2}, .stride = {1, 2}}},
      {"3x3_stride2_pad1", {1, 2, 5, 5}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {"uneven", {2, 1, 5, 6}, {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 0}}},
  };
  for (const char* kind : {"max", "avg"}) {
    for (const PoolCase& c : pools) {
      add_both(rows, pool_row(kind, c.name, c.x, c.p));
      add_both(rows, pool_backward_row(kind, c.name, c.x, c.p));
    }
  }
  // Dilated max pooling: windows clipped at both ends, and a 2x2 one that
  // must not take the 2x2 fast paths.
  const std::vector<PoolCase> dilated = {
      {"dilated",
       {1, 2, 7, 6},
       {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {2, 3}}},
      {"dilated_2x2", {2, 1, 6, 6}, {.kernel = {2, 2}, .dilation = {2, 2}}},
  };
  for (const PoolCase& c : dilated) {
    add_both(rows, pool_row("max", c.name, c.x, c.p));
    add_both(rows, pool_backward_row("max", c.name, c.x, c.p));
    rows.push_back(pool_row("max", std::string(c.name) + "_f32", c.x, c.p));
    for (Tensor& t : rows.back().inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
    rows.back().check_gradient = false;
  }
  pools.insert(pools.end(), dilated.begin(), dilated.end());
  // max_pool2d_indices: the reference's first maximum, as an offset within
  // its plane.
  for (const PoolCase& c : pools) {
    add_both(rows, {.name = c.name,
                    .op = "max_pool2d_indices",
                    .inputs = {random_tensor(c.x, 11)},
                    .attrs = c.p.attrs(),
                    .reference = [p = c.p](const Inputs& in) {
                      Shape out;
                      std::vector<int64_t> argmax;
                      pool_values("max", values_of(in[0]), in[0].shape(), p, &out, &argmax);
                      const int64_t plane = in[0].shape()[2] * in[0].shape()[3];
                      const int64_t windows = out[2] * out[3];
                      std::vector<double> within;
                      for (size_t i = 0; i < argmax.size(); ++i) {
                        within.push_back(static_cast<double>(argmax[i] - static_cast<int64_t>(i) /
                                                                             windows * plane));
                      }
                      return std::vector{result(within, out, DType::kInt64)};
                    }});
  }
  std::vector<PoolCase> adaptive = {
      {"2x3_of_5x7", {1, 2, 5, 7}, {.kernel = {2, 3}}},
      {"global", {2, 2, 3, 4}, {.kernel = {1, 1}}},
      {"upsample_4x5_of_3x2", {1, 1, 3, 2}, {.kernel = {4, 5}}},
  };
  for (const PoolCase& c : adaptive) {
    add_both(rows, pool_row("adaptive", c.name, c.x, c.p));
    add_both(rows, pool_backward_row("adaptive", c.name, c.x, c.p));
  }
  return rows;
}

std::string conv_error(Shape x, Shape w, Attrs attrs) {
  try {
    call("conv2d", {random_tensor(x, 1), random_tensor(w, 2), random_tensor({w.dim(0)}, 3)}, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string pool_error(const char* op, Shape x, Attrs attrs) {
  try {
    call(op, {random_tensor(x, 1)}, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Verifies that conv2d's attributes and shapes are checked with clear messages.
TEST(Conv2dTest, BadArgumentsAreNamed) {
  EXPECT_THAT(conv_error({1, 2, 5, 5}, {3, 2, 3, 3}, {{"stride", std::vector<int64_t>{-1, 1}}}),
              HasSubstr("conv2d: stride must be positive, got [-1, 1]"));
  EXPECT_THAT(conv_error({1, 2, 5, 5}, {3, 2, 3, 3}, {{"padding", std::vector<int64_t>{-1, 0}}}),
              HasSubstr("padding must be non-negative"));
  EXPECT_THAT(conv_error({1, 2, 5, 5}, {3, 2, 3, 3}, {{"dilation", std::vector<int64_t>{0, 1}}}),
              HasSubstr("dilation must be positive"));
  EXPECT_THAT(conv_error({1, 2, 5, 5}, {3, 2, 3, 3}, {{"stride", std::vector<int64_t>{1}}}),
              HasSubstr("stride must have 2 values"));
  EXPECT_THAT(conv_error({1, 2, 2, 2}, {3, 2, 3, 3}, {}),
              HasSubstr("dilated kernel height (3) is larger than the padded input (2 + 2 * 0)"));
  EXPECT_THAT(conv_error({1, 2, 5, 5}, {3, 2, 3, 3}, {{"dilation", std::vector<int64_t>{3, 1}}}),
              HasSubstr("dilated kernel height (7) is larger"));
  EXPECT_THAT(conv_error({1, 4, 5, 5}, {3, 2, 3, 3}, {{"groups", int64_t{2}}}),
              HasSubstr("groups = 2 must divide both the input channels (4"));
  EXPECT_THAT(conv_error({1, 3, 5, 5}, {4, 3, 3, 3}, {{"groups", int64_t{3}}}),
              HasSubstr("groups = 3 must divide"));
  EXPECT_THAT(conv_error({1, 4, 5, 5}, {4, 3, 3, 3}, {{"groups", int64_t{2}}}),
              HasSubstr("weight of shape [4, 3, 3, 3] expects 6 input channels"));
  EXPECT_THAT(conv_error({1, 2, 5, 5}, {3, 2, 3, 3}, {{"groups", int64_t{0}}}),
              HasSubstr("groups must be positive, got 0"));
  EXPECT_THAT(conv_error({2, 5, 5}, {3, 2, 3, 3}, {}),
              HasSubstr("x must be [batch, channels, height, width], got shape [2, 5, 5]"));
  try {
    call("conv2d",
         {random_tensor({1, 2, 5, 5}, 1), random_tensor({3, 2, 3, 3}, 2), random_tensor({2}, 3)});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bias must be [3], got shape [2]"));
  }
}

// Verifies that pooling attributes are checked with clear messages.
TEST(PoolTest, BadArgumentsAreNamed) {
  EXPECT_THAT(pool_error("max_pool2d", {1, 1, 4, 4}, {}),
              HasSubstr("missing required attribute 'kernel'"));
  EXPECT_THAT(pool_error("max_pool2d", {1, 1, 4, 4}, {{"kernel", std::vector<int64_t>{5, 2}}}),
              HasSubstr("kernel height (5) is larger than the padded input (4 + 2 * 0)"));
  EXPECT_THAT(
      pool_error("avg_pool2d", {1, 1, 4, 4},
                 {{"kernel", std::vector<int64_t>{2, 2}}, {"stride", std::vector<int64_t>{0, 1}}}),
      HasSubstr("avg_pool2d: stride must be positive"));
  EXPECT_THAT(
      pool_error("max_pool2d", {1, 1, 4, 4},
                 {{"kernel", std::vector<int64_t>{2, 2}}, {"padding", std::vector<int64_t>{2, 0}}}),
      HasSubstr("padding [2, 0] must be at most half the kernel [2, 2]"));
  EXPECT_THAT(pool_error("adaptive_avg_pool2d", {1, 1, 4, 4},
                         {{"output_size", std::vector<int64_t>{0, 2}}}),
              HasSubstr("output_size must be positive"));
  EXPECT_THAT(pool_error("max_pool2d", {4, 4}, {{"kernel", std::vector<int64_t>{2, 2}}}),
              HasSubstr("x must be [batch, channels, height, width]"));
  // Windows of padding alone would have no maximum (and read past an empty plane).
  EXPECT_THAT(
      pool_error("max_pool2d", {1, 1, 0, 0},
                 {{"kernel", std::vector<int64_t>{2, 2}}, {"padding", std::vector<int64_t>{1, 1}}}),
      HasSubstr("x has shape [1, 1, 0, 0]; pooling needs a height and width of at least 1"));
  // A dilated window can fall on padding alone: positions -1 and 1 of a
  // height of 1.
  EXPECT_THAT(pool_error("max_pool2d", {1, 1, 1, 3},
                         {{"kernel", std::vector<int64_t>{2, 1}},
                          {"padding", std::vector<int64_t>{1, 0}},
                          {"dilation", std::vector<int64_t>{2, 1}}}),
              HasSubstr("window 0 along height reads padding alone (kernel [2, 1], dilation "
                        "[2, 1], padding [1, 0], x of shape [1, 1, 1, 3])"));
  EXPECT_THAT(pool_error("avg_pool2d", {1, 1, 4, 4},
                         {{"kernel", std::vector<int64_t>{2, 2}},
                          {"dilation", std::vector<int64_t>{2, 2}}}),
              HasSubstr("dilation"));
}

// Verifies that a NaN in a window makes that window's maximum NaN, and only
// that window's, on each of the pooling loops (2x2, other windows without
// padding, padded windows) and in both float dtypes.
TEST(PoolTest, MaxPoolingPropagatesNaN) {
  struct Case {
    std::vector<int64_t> kernel, stride, padding;
    int64_t nan_window;  // The output element whose window holds the NaN.
  };
  // x is 1x1x4x4 with the NaN at (1, 1).
  const std::vector<Case> cases = {
      {{2, 2}, {2, 2}, {0, 0}, 0}, {{3, 3}, {1, 1}, {0, 0}, 0}, {{2, 2}, {2, 2}, {1, 1}, 4}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      std::vector<double> values(16);
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
      values[5] = NAN;
      Tensor y = call1("max_pool2d", {tensor_of(values, {1, 1, 4, 4}, dtype)},
                       {{"kernel", c.kernel}, {"stride", c.stride}, {"padding", c.padding}});
      std::vector<double> got = values_of(y);
      for (size_t k = 0; k < got.size(); ++k) {
        // The 3x3 windows all hold (1, 1).
        const bool holds_nan = c.kernel[0] == 3 || static_cast<int64_t>(k) == c.nan_window;
        EXPECT_EQ(std::isnan(got[k]), holds_nan)
            << dtype_name(dtype) << " kernel " << c.kernel[0] << " padding " << c.padding[0]
            << ", output " << k << " = " << got[k];
      }
    }
  }
}

// Verifies that max pooling's gradient goes to each window's first maximum
// (row-major), a NaN counting as the maximum, on a plane without NaN (the
// 2x2 pass) and one with (the window-by-window loop).
TEST(PoolTest, MaxPoolingGradientGoesToTheFirstMaximum) {
  const std::vector<double> x = {1, 5,   5, 2, 5, 0,   7, 7,   // Plane 0: no NaN, ties.
                                 1, NAN, 3, 3, 2, NAN, 3, 1};  // Plane 1: NaN.
  const std::vector<double> want = {0, 10, 0, 0, 0, 0, 20, 0, 0, 30, 40, 0, 0, 0, 0, 0};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor gx =
        call1("max_pool2d_backward",
              {tensor_of(x, {1, 2, 2, 4}, dtype), tensor_of({10, 20, 30, 40}, {1, 2, 1, 2}, dtype)},
              {{"kernel", std::vector<int64_t>{2, 2}}});
    EXPECT_EQ(values_of(gx), want) << dtype_name(dtype);
  }
}

// Verifies the output size rule (floor) and the default stride (= kernel).
TEST(PoolTest, OutputShapes) {
  Tensor x = random_tensor({2, 3, 7, 6}, 1, -1, 1, DType::kFloat32);
  EXPECT_EQ(call1("max_pool2d", {x}, {{"kernel", std::vector<int64_t>{2, 2}}}).shape(),
            (Shape{2, 3, 3, 3}));
  EXPECT_EQ(call1("avg_pool2d", {x},
                  {{"kernel", std::vector<int64_t>{3, 3}},
                   {"stride", std::vector<int64_t>{2, 2}},
                   {"padding", std::vector<int64_t>{1, 1}}})
                .shape(),
            (Shape{2, 3, 4, 3}));
  EXPECT_EQ(call1("conv2d",
                  {x, random_tensor({4, 3, 3, 3}, 2, -1, 1, DType::kFloat32),
                   random_tensor({4}, 3, -1, 1, DType::kFloat32)},
                  {{"stride", std::vector<int64_t>{2, 2}}})
                .shape(),
            (Shape{2, 4, 3, 2}));
}

// Verifies that a bad activation name is an error naming the op and the
// value, and that a fused conv2d refuses to be differentiated.
TEST(Conv2dTest, FusedActivationChecks) {
  Inputs in = {random_tensor({1, 2, 4, 4}, 1), random_tensor({3, 2, 3, 3}, 2),
               random_tensor({3}, 3)};
  EXPECT_THAT(error_of([&] {
                call("conv2d", in, {{"activation", std::string("swish")}});
              }),
              ::testing::AllOf(HasSubstr("conv2d"), HasSubstr("'swish'")));
  const OpDef& conv2d = Registry::global().get("conv2d");
  Attrs attrs = resolve_attrs(conv2d, {{"activation", std::string("tanh")}});
  Inputs out = call("conv2d", in, attrs);
  Inputs grad = {out[0]};
  EXPECT_THAT(
      error_of([&] {
        conv2d.gradient({.inputs = in, .outputs = out, .grad_outputs = grad, .attrs = attrs});
      }),
      HasSubstr("fused activation is for inference graphs"));
}

// Verifies that conv_transpose2d checks its weight, output_padding and sizes.
TEST(ConvPoolOpsTest, ConvTransposeErrors) {
  Tensor x = random_tensor({1, 2, 3, 3}, 1);
  auto error = [&](Shape w, Attrs attrs, int64_t bias = 3) {
    return error_of([&] {
      call("conv_transpose2d", {x, random_tensor(w, 2), random_tensor({bias}, 3)}, attrs);
    });
  };
  EXPECT_THAT(error({3, 3, 2, 2}, {}),
              HasSubstr("weight must be [in_channels = 2, out_channels / groups, kH, kW]"));
  EXPECT_THAT(error({2, 3, 2, 2}, {{"output_padding", std::vector<int64_t>{1, 0}}}),
              HasSubstr("output_padding [1, 0] must be below the stride [1, 1]"));
  EXPECT_THAT(error({2, 3, 2, 2}, {{"padding", std::vector<int64_t>{3, 0}}}),
              HasSubstr("gives output size -2 on axis 2; it must be at least 1"));
  EXPECT_THAT(error({2, 3, 2, 2}, {}, 4), HasSubstr("bias must be [3], got shape [4]"));
}

}  // namespace
}  // namespace tandem::kernels::testing
