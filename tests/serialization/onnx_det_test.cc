// ONNX's Det through the importer (serialization/onnx_det.cc) against
// Laplace's cofactor expansion, an independent algorithm, on batches of
// random matrices of sizes 1 to 6, with singular ones and ones whose first
// pivot is zero.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "core/tensor.h"
#include "serialization/onnx_import.h"
#include "tests/serialization/onnx_model_builder.h"

#include "onnx/onnx_pb.h"

namespace tandem {
namespace {

double cofactor_det(const std::vector<double>& m, int64_t n) {
  if (n == 1) return m[0];
  double det = 0;
  for (int64_t c = 0; c < n; ++c) {
    std::vector<double> minor;
    for (int64_t r = 1; r < n; ++r) {
      for (int64_t cc = 0; cc < n; ++cc) {
        if (cc != c) minor.push_back(m[size_t(r * n + cc)]);
      }
    }
    det += (c % 2 == 0 ? 1 : -1) * m[size_t(c)] * cofactor_det(minor, n - 1);
  }
  return det;
}

TEST(OnnxDetTest, MatchesCofactorExpansion) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> uniform(-2, 2);
  for (int64_t n = 1; n <= 6; ++n) {
    SCOPED_TRACE(str_cat(n, " x ", n));
    const int64_t count = 6;  // [2, 3, n, n]
    std::vector<double> x(size_t(count * n * n));
    for (double& v : x) v = uniform(rng);
    if (n >= 2) {
      for (int64_t c = 0; c < n; ++c) x[size_t(n * n + n + c)] = x[size_t(n * n + c)];  // Singular.
      x[size_t(2 * n * n)] = 0;  // A zero first pivot.
    }
    onnx::ModelProto m = testing::model_with_opset(11);
    onnx::GraphProto& g = *m.mutable_graph();
    testing::add_input(g, "x", {"2", "3", str_cat(n), str_cat(n)});
    g.mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto_DataType_DOUBLE);
    testing::add_node(g, "Det", {"x"}, {"d"});
    g.add_output()->set_name("d");
    const Tensor d = import_onnx(testing::bytes_of(m), "det.onnx")
                         .run({Tensor::from_vector<double>(x, Shape{2, 3, n, n})})
                         .at(0);
    ASSERT_EQ(d.shape(), (Shape{2, 3}));
    const std::vector<double> got = d.to_vector<double>();
    for (int64_t b = 0; b < count; ++b) {
      const std::vector<double> matrix(x.begin() + b * n * n, x.begin() + (b + 1) * n * n);
      const double want = cofactor_det(matrix, n);
      EXPECT_NEAR(got[size_t(b)], want, 1e-9 * (1 + std::abs(want))) << "matrix " << b;
    }
  }
}

}  // namespace
}  // namespace tandem
