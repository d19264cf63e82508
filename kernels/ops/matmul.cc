// Matrix products: matmul (NumPy semantics: batch dimensions broadcast,
// 1-D operands promoted to a row or column and the added axis dropped from
// the result) and linear (x W^T + b, the fully connected layer).
//
// matmul also takes "transpose_a" / "transpose_b": multiply by the transpose
// of the last two axes of an operand without materializing it (ignored for
// 1-D operands). Its own gradient uses them, so backward needs no transpose op.
//
// float32 runs on oneDNN's matmul primitive (strided descriptors express the
// transposes and the broadcast batch axes); float64 runs plain loops.
//
// linear also takes "activation" and "alpha", which only activation fusion
// sets (Note [Fused activation] in kernels/cpu/onednn.h).
#include <algorithm>
#include <cstring>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/primitive_cache.h"
#include "kernels/cpu/row_linear.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// What inference and the kernel need to know about one product.
struct MatmulGeometry {
  Shape batch_a, batch_b, batch;  // Batch axes of each operand and of the result.
  int64_t m = 1, k = 1, n = 1;
  bool transpose_a = false, transpose_b = false;  // Of the stored [.., rows, cols] operands.
  Shape out;
};

Shape sub_shape(const Shape& s, int begin, int end) {
  return Shape(absl::Span<const int64_t>(s.dims().data() + begin, end - begin));
}

MatmulGeometry matmul_geometry(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b) {
  TANDEM_CHECK(a.rank() >= 1 && b.rank() >= 1, "operands must have at least one axis, got shapes ",
               a.to_string(), " and ", b.to_string());
  MatmulGeometry g;
  g.transpose_a = transpose_a && a.rank() >= 2;
  g.transpose_b = transpose_b && b.rank() >= 2;
  int64_t k_a, k_b;
  if (a.rank() == 1) {
    k_a = a[0];
  } else {
    if (a.rank() > 2) g.batch_a = sub_shape(a, 0, a.rank() - 2);
    const int64_t rows = a[a.rank() - 2], cols = a[a.rank() - 1];
    g.m = g.transpose_a ? cols : rows;
    k_a = g.transpose_a ? rows : cols;
  }
  if (b.rank() == 1) {
    k_b = b[0];
  } else {
    if (b.rank() > 2) g.batch_b = sub_shape(b, 0, b.rank() - 2);
    const int64_t rows = b[b.rank() - 2], cols = b[b.rank() - 1];
    k_b = g.transpose_b ? cols : rows;
    g.n = g.transpose_b ? rows : cols;
  }
  TANDEM_CHECK(k_a == k_b, "shapes ", a.to_string(), (g.transpose_a ? " (transposed)" : ""),
               " and ", b.to_string(), (g.transpose_b ? " (transposed)" : ""),
               " cannot be multiplied: inner dimensions ", k_a, " and ", k_b, " differ");
  g.k = k_a;
  Shape::Dims batch_dims;
  if (g.batch_a.rank() + g.batch_b.rank() > 0) {
    // Broadcast the batch axes, with a message that names the full shapes.
    int rank = std::max(g.batch_a.rank(), g.batch_b.rank());
    batch_dims.resize(rank);
    for (int i = 1; i <= rank; ++i) {
      int64_t da = i <= g.batch_a.rank() ? g.batch_a[g.batch_a.rank() - i] : 1;
      int64_t db = i <= g.batch_b.rank() ? g.batch_b[g.batch_b.rank() - i] : 1;
      TANDEM_CHECK(da == db || da == 1 || db == 1, "shapes ", a.to_string(), " and ", b.to_string(),
                   " cannot be multiplied: batch dimensions ", da, " and ", db,
                   " do not broadcast");
      batch_dims[rank - i] = da == 1 ? db : da;
    }
  }
  g.batch = Shape(batch_dims);
  Shape::Dims out = batch_dims;
  if (a.rank() >= 2) out.push_back(g.m);
  if (b.rank() >= 2) out.push_back(g.n);
  g.out = Shape(out);
  return g;
}

void check_float_pair(const TensorMeta& a, const TensorMeta& b, const char* what_a,
                      const char* what_b) {
  check_floating(what_a, a.dtype);
  TANDEM_CHECK(a.dtype == b.dtype, "dtype mismatch: ", what_a, " is ", dtype_name(a.dtype), ", ",
               what_b, " is ", dtype_name(b.dtype), "; cast one operand first");
}

TensorMetas infer_matmul(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_float_pair(in[0], in[1], "a", "b");
  MatmulGeometry g = matmul_geometry(in[0].shape, in[1].shape, attrs.get_bool("transpose_a"),
                                     attrs.get_bool("transpose_b"));
  return {{g.out, in[0].dtype}};
}

// The offset of each batch entry's matrix in a and in b, in result order.
void batch_offsets(const MatmulGeometry& g, std::vector<int64_t>& offset_a,
                   std::vector<int64_t>& offset_b) {
  int64_t count = g.batch.numel();
  offset_a.assign(count, 0);
  offset_b.assign(count, 0);
  Strides sa = broadcast_strides(g.batch_a, g.batch), sb = broadcast_strides(g.batch_b, g.batch);
  int64_t size_a = g.m * g.k, size_b = g.k * g.n;
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i;
    for (int axis = g.batch.rank() - 1; axis >= 0; --axis) {
      int64_t index = rest % g.batch[axis];
      rest /= g.batch[axis];
      offset_a[i] += index * sa[axis] * size_a;
      offset_b[i] += index * sb[axis] * size_b;
    }
  }
}

// One [m, k] x [k, n] product into `out`, in plain loops.
template <class T>
void matmul_one(const MatmulGeometry& g, const T* a, const T* b, T* out) {
  const int64_t m = g.m, k = g.k, n = g.n;
  // Element (i, j) of the logical [m, k] / [k, n] operands.
  const int64_t a_row = g.transpose_a ? 1 : k, a_col = g.transpose_a ? m : 1;
  const int64_t b_row = g.transpose_b ? 1 : n, b_col = g.transpose_b ? k : 1;
  std::fill(out, out + m * n, T{0});
  for (int64_t i = 0; i < m; ++i) {
    T* out_row = out + i * n;
    for (int64_t p = 0; p < k; ++p) {
      const T x = a[i * a_row + p * a_col];
      const T* b_row_p = b + p * b_row;
      if (b_col == 1) {
        for (int64_t j = 0; j < n; ++j) out_row[j] += x * b_row_p[j];  // Contiguous: vectorizes.
      } else {
        for (int64_t j = 0; j < n; ++j) out_row[j] += x * b_row_p[j * b_col];
      }
    }
  }
}

// Plain loops: float64, small float32 products, and float32 beyond oneDNN's
// rank limit.
template <class T>
void matmul_loops(const MatmulGeometry& g, const T* a, const T* b, T* out) {
  if (g.batch.rank() == 0) {
    matmul_one(g, a, b, out);  // No batch: no offsets to compute.
    return;
  }
  std::vector<int64_t> offset_a, offset_b;
  batch_offsets(g, offset_a, offset_b);
  for (size_t batch = 0; batch < offset_a.size(); ++batch) {
    matmul_one(g, a + offset_a[batch], b + offset_b[batch],
               out + static_cast<int64_t>(batch) * g.m * g.n);
  }
}

// Strides of the logical view of a stored [batch..., rows, cols] operand
// (its transpose when `transposed`), padded to `rank` axes.
dnnl::memory::dims operand_strides(const Shape& batch, int rank, int64_t rows, int64_t cols,
                                   bool transposed) {
  dnnl::memory::dims strides(rank);
  strides[rank - 1] = transposed ? cols : 1;
  strides[rank - 2] = transposed ? 1 : cols;
  int64_t stride = rows * cols;
  for (int axis = rank - 3; axis >= 0; --axis) {
    strides[axis] = stride;
    int batch_axis = axis - (rank - 2 - batch.rank());
    if (batch_axis >= 0) stride *= std::max<int64_t>(batch[batch_axis], 1);
  }
  return strides;
}

dnnl::memory::dims padded_dims(const Shape& batch, int rank, int64_t rows, int64_t cols) {
  dnnl::memory::dims dims(rank, 1);
  for (int i = 0; i < batch.rank(); ++i) dims[rank - 2 - batch.rank() + i] = batch[i];
  dims[rank - 2] = rows;
  dims[rank - 1] = cols;
  return dims;
}

void matmul_onednn(const MatmulGeometry& g, const Tensor& a, const Tensor& b, const Tensor& out) {
  using namespace onednn;
  int rank = g.batch.rank() + 2;
  // The logical [.., m, k] and [.., k, n] views; strides say how they are stored.
  dnnl::memory::desc a_md = strided_desc(padded_dims(g.batch_a, rank, g.m, g.k),
                                         operand_strides(g.batch_a, rank, g.transpose_a ? g.k : g.m,
                                                         g.transpose_a ? g.m : g.k, g.transpose_a));
  dnnl::memory::desc b_md = strided_desc(padded_dims(g.batch_b, rank, g.k, g.n),
                                         operand_strides(g.batch_b, rank, g.transpose_b ? g.n : g.k,
                                                         g.transpose_b ? g.k : g.n, g.transpose_b));
  dnnl::memory::desc out_md = strided_desc(padded_dims(g.batch, rank, g.m, g.n),
                                           operand_strides(g.batch, rank, g.m, g.n, false));
  const dnnl::matmul::desc op(a_md, b_md, out_md);
  const auto product = cached_primitive<dnnl::matmul>("matmul", PrimitiveKey().add(op.data), [&] {
    return dnnl::matmul::primitive_desc(op, cpu_engine());
  });
  execute(product->primitive,
          {{DNNL_ARG_SRC, wrap(a, a_md)},
           {DNNL_ARG_WEIGHTS, wrap(b, b_md)},
           {DNNL_ARG_DST, wrap(out, out_md)}},
          "matmul");
}

// A float32 product without batch axes goes to oneDNN's sgemm rather than
// its matmul primitive: ONEDNN_VERBOSE showed the primitive at 0.18 ms for
// a 256^3 product where a whole dnnl_sgemm call took 0.11 ms, and sgemm
// needs no primitive lookup. Both run on oneDNN's OpenMP threads.
void matmul_sgemm(const MatmulGeometry& g, const float* a, const float* b, float* out) {
  // Row-major leading dimensions of the operands as stored.
  cpu::gemm(g.transpose_a, g.transpose_b, g.m, g.n, g.k, 1.0f, a, g.transpose_a ? g.m : g.k, b,
            g.transpose_b ? g.k : g.n, 0.0f, out, g.n);
}

// Below this many multiply-adds (a 16x16x16 product) the plain loops finish
// before oneDNN has looked its primitive up: bench_ops measured a 4x4 float
// matmul at 3.9 us through oneDNN (naive engine) against 0.6 us in loops.
constexpr int64_t kSmallMatmul = 16 * 16 * 16;

// matmul's OpDef::work: its multiply-adds, the result's elements times the
// inner dimension k. A 1-D operand is k long. Otherwise which axis of a holds
// k depends on transpose_a, which the shapes do not give, but the result's
// rows m do: a [.., r, c] has r rows unless transposed, so k is r when c ==
// m and c otherwise (where r == c == m, k is that either way).
int64_t matmul_work(const CallShapes& shapes) {
  const Shape &a = *shapes.inputs[0], &b = *shapes.inputs[1], &out = *shapes.outputs[0];
  int64_t k;
  if (a.rank() == 1) {
    k = a[0];
  } else if (b.rank() == 1) {
    k = b[0];
  } else {
    const int64_t m = out[out.rank() - 2];
    k = a[a.rank() - 1] == m ? a[a.rank() - 2] : a[a.rank() - 1];
  }
  return out.numel() * k;
}

// matmul's OpDef::one_core: the products matmul_kernel runs in its plain loops.
bool matmul_on_one_core(const CallShapes& shapes) { return matmul_work(shapes) <= kSmallMatmul; }

void matmul_kernel(const KernelContext& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &out = c.outputs[0];
  MatmulGeometry g = matmul_geometry(a.shape(), b.shape(), c.attrs.get_bool("transpose_a"),
                                     c.attrs.get_bool("transpose_b"));
  if (out.numel() == 0) return;
  visit_floating(a.dtype(), [&]<class T>() {
    if (g.k == 0) {
      std::fill(out.data<T>(), out.data<T>() + out.numel(), T{0});
    } else if (std::is_same_v<T, float> && g.batch.rank() == 0 && g.m * g.n * g.k > kSmallMatmul) {
      matmul_sgemm(g, a.data<float>(), b.data<float>(), out.data<float>());
    } else if (std::is_same_v<T, float> && g.batch.rank() + 2 <= DNNL_MAX_NDIMS &&
               g.batch.numel() * g.m * g.n * g.k > kSmallMatmul) {
      matmul_onednn(g, a, b, out);
    } else {
      matmul_loops<T>(g, a.data<T>(), b.data<T>(), out.data<T>());
    }
  });
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  std::vector<int64_t> dims(shape.begin(), shape.end());
  return nested_call1(reshape_op(), {t}, {{"shape", dims}});
}

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  return nested_call1("matmul", {a, b},
                      {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}});
}

// With op(X) = X or X^T as the flags say, C = op(A) op(B):
//   dA = g op(B)^T, or its transpose op(B) g^T when A was transposed;
//   dB = op(A)^T g, or its transpose g^T op(A) when B was transposed;
// each summed over the batch axes its operand was broadcast along. 1-D
// operands are made 2-D first (a row, b a column), as in the forward.
std::vector<Tensor> matmul_gradient(const GradContext& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  bool ta = c.attrs.get_bool("transpose_a") && a.rank() >= 2;
  bool tb = c.attrs.get_bool("transpose_b") && b.rank() >= 2;
  MatmulGeometry geo = matmul_geometry(a.shape(), b.shape(), ta, tb);
  Tensor a2 = a.rank() == 1 ? reshape(a, Shape{int64_t{1}, a.shape()[0]}) : a;
  Tensor b2 = b.rank() == 1 ? reshape(b, Shape{b.shape()[0], int64_t{1}}) : b;
  Shape::Dims g_dims(geo.batch.begin(), geo.batch.end());
  g_dims.push_back(geo.m);
  g_dims.push_back(geo.n);
  Tensor g = reshape(c.grad_outputs[0], Shape(g_dims));
  Tensor grad_a, grad_b;
  if (c.needs_grad(0)) {
    grad_a = ta ? matmul(b2, g, tb, true) : matmul(g, b2, false, !tb);
    grad_a = reshape(sum_to(grad_a, a2.shape()), a.shape());
  }
  if (c.needs_grad(1)) {
    grad_b = tb ? matmul(g, a2, true, ta) : matmul(a2, g, !ta, false);
    grad_b = reshape(sum_to(grad_b, b2.shape()), b.shape());
  }
  return {grad_a, grad_b};
}

// linear: x [..., in], weight [out, in], bias [out] -> [..., out].

TensorMetas infer_linear(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  onednn::fused_activation(attrs);  // Checks the name.
  const Shape &x = in[0].shape, &w = in[1].shape, &b = in[2].shape;
  check_float_pair(in[0], in[1], "x", "weight");
  check_float_pair(in[0], in[2], "x", "bias");
  TANDEM_CHECK(x.rank() >= 1, "x must have at least one axis, got shape ", x.to_string());
  TANDEM_CHECK(w.rank() == 2, "weight must be [out_features, in_features], got shape ",
               w.to_string());
  TANDEM_CHECK(x.dim(-1) == w[1], "x of shape ", x.to_string(), " has ", x.dim(-1),
               " features but weight of shape ", w.to_string(), " expects ", w[1]);
  TANDEM_CHECK(b.rank() == 1 && b[0] == w[0], "bias must be [", w[0], "] for weight of shape ",
               w.to_string(), ", got ", b.to_string());
  Shape::Dims out(x.begin(), x.end());
  out.back() = w[0];
  return {{Shape(out), in[0].dtype}};
}

// The rows of x: all its axes but the last, flattened.
int64_t linear_rows(const Shape& y, const Shape& w) { return w[0] == 0 ? 0 : y.numel() / w[0]; }

// linear's OpDef::one_core: the few-rows kernel (Note [Linear for a few
// rows]) for float32, plain loops for float64; both on one thread.
bool linear_on_one_core(const CallShapes& shapes) {
  const Shape& w = *shapes.inputs[1];
  return cpu::row_linear_fits(linear_rows(*shapes.outputs[0], w), w[1], w[0]);
}

void linear_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &bias = c.inputs[2], &y = c.outputs[0];
  const int64_t in = w.shape()[1], out = w.shape()[0];
  if (y.numel() == 0) return;
  const int64_t rows = linear_rows(y.shape(), w.shape());
  const onednn::FusedActivation activation = onednn::fused_activation(c.attrs);
  visit_floating(x.dtype(), [&]<class T>() {
    const T *px = x.data<T>(), *pw = w.data<T>(), *pb = bias.data<T>();
    T* py = y.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (cpu::row_linear_fits(rows, in, out)) {  // Note [Linear for a few rows].
        cpu::row_linear(px, pw, pb, py, rows, in, out);
        onednn::apply_activation(activation, py, y.numel());
        return;
      }
      if (in > 0) {
        using namespace onednn;
        dnnl::memory::desc x_md = desc({rows, in}, dnnl::memory::format_tag::ab);
        dnnl::memory::desc w_md = strided_desc({in, out}, {1, in});  // W^T, in place.
        dnnl::memory::desc b_md = desc({1, out}, dnnl::memory::format_tag::ab);
        dnnl::memory::desc y_md = desc({rows, out}, dnnl::memory::format_tag::ab);
        const dnnl::matmul::desc op(x_md, w_md, b_md, y_md);
        const auto layer = cached_primitive<dnnl::matmul>(
            "linear", PrimitiveKey().add(op.data).add(activation), [&] {
              return dnnl::matmul::primitive_desc(op, post_op_attr(activation), cpu_engine());
            });
        execute(layer->primitive,
                {{DNNL_ARG_SRC, wrap(x, x_md)},
                 {DNNL_ARG_WEIGHTS, wrap(w, w_md)},
                 {DNNL_ARG_BIAS, wrap(bias, b_md)},
                 {DNNL_ARG_DST, wrap(y, y_md)}},
                "linear");
        return;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        T sum = pb[o];
        for (int64_t i = 0; i < in; ++i) sum += px[r * in + i] * pw[o * in + i];
        py[r * out + o] = sum;
      }
    }
    onednn::apply_activation(activation, py, y.numel());
  });
}

// The gradient of a fused activation would need the pre-activation values,
// which the fused layer never writes; activation fusion only fuses where
// nothing reads them, so no backward pass asks.
void check_no_activation(const char* op_name, const Attrs& attrs) {
  const std::string& activation = attrs.get_string("activation");
  TANDEM_CHECK(activation == "none", op_name, " with activation '", activation,
               "' has no gradient: fused activation is for inference graphs; differentiate ",
               op_name, " followed by the ", activation, " op instead");
}

// grad_x = g W; grad_W = g2d^T x2d (rows flattened); grad_b = g summed over
// the leading axes. A first layer's x is data: no gradient, no product.
std::vector<Tensor> linear_gradient(const GradContext& c) {
  check_no_activation("linear", c.attrs);
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const Tensor& g = c.grad_outputs[0];
  const int64_t in = w.shape()[1], out = w.shape()[0];
  Tensor grad_x = c.needs_grad(0) ? matmul(g, w, false, false) : Tensor();
  Tensor grad_w, grad_b;
  if (x.rank() == 1) {
    grad_w =
        matmul(reshape(g, Shape{out, int64_t{1}}), reshape(x, Shape{int64_t{1}, in}), false, false);
    grad_b = g;
  } else {
    int64_t rows = 1;
    for (int axis = 0; axis + 1 < x.rank(); ++axis) rows *= x.shape()[axis];
    Tensor g2 = reshape(g, Shape{rows, out});
    grad_w = matmul(g2, reshape(x, Shape{rows, in}), true, false);
    grad_b = nested_call1(sum_op(), {g2}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", false}});
  }
  return {grad_x, grad_w, grad_b};
}

}  // namespace

const OpDef& linear_op() { return op_def<"linear">(); }
const OpDef& matmul_op() { return op_def<"matmul">(); }

void register_matmul_ops(Registry& registry) {
  registry.add({.name = "matmul",
                .num_inputs = 2,
                .attrs = {{"transpose_a", false}, {"transpose_b", false}},
                .infer = infer_matmul,
                .cpu = matmul_kernel,
                .gradient = matmul_gradient,
                .doc = "a @ b with NumPy semantics (batch axes broadcast, 1-D operands "
                       "promoted); transpose_a/transpose_b use the transpose of the last two "
                       "axes",
                .uses_all_cores = true,
                .one_core = matmul_on_one_core,
                .work = matmul_work});
  registry.add({.name = "linear",
                .num_inputs = 3,
                .attrs = onednn::activation_attrs(),
                .infer = infer_linear,
                .cpu = linear_kernel,
                .gradient = linear_gradient,
                .doc = "x @ weight^T + bias, then the activation (none by default); x [..., in], "
                       "weight [out, in], bias [out]",
                .uses_all_cores = true,
                .one_core = linear_on_one_core});
}

}  // namespace tandem::kernels
