#include "tests/kernels/op_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"

namespace tandem::kernels::testing {

std::vector<std::pair<std::string, RowsFn>>& families() {
  static std::vector<std::pair<std::string, RowsFn>> all;
  return all;
}

bool register_op_rows(const char* family, RowsFn rows) {
  families().emplace_back(family, rows);
  return true;
}

const std::vector<std::pair<std::string, RowsFn>>& registered_row_families() { return families(); }

Tensor tensor_of(std::vector<double> values, Shape shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "tensor_of: ", values.size(),
               " values for shape ", shape.to_string());
  visit_all(dtype, [&]<class T>() {
    T* data = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        data[i] = T(static_cast<float>(values[i]));
      } else {
        data[i] = static_cast<T>(values[i]);
      }
    }
  });
  return t;
}

Tensor result(std::vector<double> values, Shape shape, DType dtype) {
  return tensor_of(std::move(values), std::move(shape), dtype);
}

Tensor random_tensor(Shape shape, uint64_t seed, double low, double high, DType dtype) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  std::vector<double> values(shape.numel());
  for (double& v : values) v = uniform(rng);
  return tensor_of(std::move(values), std::move(shape), dtype);
}

std::vector<double> values_of(const Tensor& device_tensor) {
  Tensor t = on_device(device_tensor, Device::cpu());
  t.wait_to_read();
  std::vector<double> values(t.numel());
  visit_all(t.dtype(), [&]<class T>() {
    const T* data = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        values[i] = static_cast<float>(data[i]);
      } else {
        values[i] = static_cast<double>(data[i]);
      }
    }
  });
  return values;
}

void add_both(std::vector<OpTestCase>& rows, OpTestCase row, double f32_tolerance) {
  OpTestCase f32 = row;
  f32.name += "_f32";
  for (Tensor& t : f32.inputs) {
    if (t.dtype() == DType::kFloat64) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
  }
  f32.tolerance = f32_tolerance;
  f32.check_gradient = false;
  rows.push_back(std::move(row));
  rows.push_back(std::move(f32));
}

Tensor on_device(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  return call1("to_device", {t}, {{"device", device.to_string()}});
}

std::vector<int> gradient_checked_inputs(const OpTestCase& row) {
  if (!row.check_gradient) return {};
  if (!row.grad_inputs.empty()) return row.grad_inputs;
  std::vector<int> inputs;
  for (size_t i = 0; i < row.inputs.size(); ++i) {
    if (row.inputs[i].dtype() == DType::kFloat64) inputs.push_back(static_cast<int>(i));
  }
  return inputs;
}

Moments bernoulli(double p) {
  // E[(x - p)^4] = p (1 - p)^4 + (1 - p) p^4.
  return {.mean = p,
          .variance = p * (1 - p),
          .fourth = p * std::pow(1 - p, 4) + (1 - p) * std::pow(p, 4)};
}

void expect_moments(const std::vector<double>& samples, const Moments& m) {
  ASSERT_GE(samples.size(), 2u) << "moments need a sample";
  const double n = static_cast<double>(samples.size());
  double sum = 0;
  for (double x : samples) sum += x;
  const double mean = sum / n;
  double squares = 0;
  for (double x : samples) squares += (x - mean) * (x - mean);
  const double variance = squares / (n - 1);
  constexpr double kStandardErrors = 6;
  const double mean_bound = kStandardErrors * std::sqrt(m.variance / n);
  const double variance_bound =
      kStandardErrors * std::sqrt((m.fourth - m.variance * m.variance) / n);
  EXPECT_NEAR(mean, m.mean, mean_bound) << "sample mean of " << samples.size() << " values";
  EXPECT_NEAR(variance, m.variance, variance_bound)
      << "sample variance of " << samples.size() << " values";
}

Tensor map1(const Tensor& a, const std::function<double(double)>& f, DType dtype) {
  std::vector<double> values = values_of(a);
  for (double& v : values) v = f(v);
  return result(std::move(values), a.shape(), dtype);
}

Tensor map2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f,
            DType dtype) {
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  Strides sa = broadcast_strides(a.shape(), shape), sb = broadcast_strides(b.shape(), shape);
  std::vector<double> va = values_of(a), vb = values_of(b), out(shape.numel());
  for (int64_t i = 0; i < shape.numel(); ++i) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      int64_t index = rest % shape[axis];
      rest /= shape[axis];
      ia += index * sa[axis];
      ib += index * sb[axis];
    }
    out[i] = f(va[ia], vb[ib]);
  }
  return result(std::move(out), shape, dtype);
}

std::vector<ActivationCase> fused_activations() {
  std::vector<ActivationCase> cases;
  for (const ElementwiseInfo& op : elementwise::UnaryOps::infos()) {
    if (op.post_op.algorithm == PostOpAlgorithm::kNone) continue;
    ActivationCase a{.name = std::string(op.name)};
    if (op.num_params == 1) {
      a.param = std::string(op.params[0].name);
      a.alpha = op.params[0].default_value * 0.5 + 0.1;
    }
    cases.push_back(a);
  }
  return cases;
}

Attrs with_activation(Attrs attrs, const ActivationCase& a) {
  attrs.set("activation", a.name);
  attrs.set("alpha", a.alpha);
  return attrs;
}

OpTestCase activated(OpTestCase row, const ActivationCase& a) {
  row.name += str_cat("_", a.name);
  row.attrs = with_activation(row.attrs, a);
  row.check_gradient = false;
  auto unfused = row.reference;
  Attrs op_attrs;
  if (!a.param.empty()) op_attrs.set(a.param, a.alpha);
  row.reference = [unfused, a, op_attrs](const Inputs& in) {
    return std::vector{call1(a.name, {unfused(in)[0]}, op_attrs)};
  };
  return row;
}

OpTestCase row(std::string op, std::string name, Inputs inputs, Attrs attrs,
               std::function<Tensor(const Inputs&)> reference) {
  bool gradient = std::any_of(inputs.begin(), inputs.end(),
                              [](const Tensor& t) { return t.dtype() == DType::kFloat64; });
  return {.name = std::move(name),
          .op = std::move(op),
          .inputs = std::move(inputs),
          .attrs = std::move(attrs),
          .reference = [reference](const Inputs& in) { return std::vector{reference(in)}; },
          .check_gradient = gradient};
}

HostTensor::HostTensor(const Tensor& t) : shape(t.shape()), values(values_of(t)) {}

double HostTensor::at(const Index& index) const {
  int64_t flat = 0;
  for (int i = 0; i < shape.rank(); ++i) flat = flat * shape[i] + index[i];
  return values[static_cast<size_t>(flat)];
}

void for_each_index(const Shape& shape, const std::function<void(const Index&)>& f) {
  Index index(shape.rank(), 0);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    int64_t rest = i;
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      index[axis] = rest % shape[axis];
      rest /= shape[axis];
    }
    f(index);
  }
}

Tensor build(const Shape& shape, DType dtype, const std::function<double(const Index&)>& f) {
  std::vector<double> out;
  for_each_index(shape, [&](const Index& index) { out.push_back(f(index)); });
  return result(std::move(out), shape, dtype);
}

}  // namespace tandem::kernels::testing
