// ONNX's Einsum through the importer (serialization/onnx_einsum.cc) against
// a reference that sums every assignment of the labels, one by one, on
// random operands: diagonals, sums, transposes, batched and chained
// products, implicit outputs, and ellipses that broadcast.
#include <map>
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

struct Case {
  std::string equation;   // As the model writes it.
  std::string reference;  // The same with letters for the ellipsis and the output explicit.
  std::vector<std::vector<int64_t>> shapes;
};

std::vector<std::string> split_terms(const std::string& equation, std::string& output) {
  const size_t arrow = equation.find("->");
  output = equation.substr(arrow + 2);
  std::vector<std::string> terms;
  std::string inputs = equation.substr(0, arrow);
  for (size_t begin = 0;;) {
    const size_t comma = inputs.find(',', begin);
    terms.push_back(inputs.substr(begin, comma - begin));
    if (comma == std::string::npos) return terms;
    begin = comma + 1;
  }
}

// out[o] = sum over every assignment of the labels of the product of the
// operands' elements; a size-1 axis broadcasts.
std::vector<double> reference_einsum(const Case& c, const std::vector<std::vector<float>>& values,
                                     std::vector<int64_t>& out_shape) {
  std::string output;
  const std::vector<std::string> terms = split_terms(c.reference, output);
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t) {
    for (size_t a = 0; a < terms[t].size(); ++a) {
      size[terms[t][a]] = std::max(size[terms[t][a]], c.shapes[t][a]);
    }
  }
  std::vector<char> labels;
  for (const auto& [label, s] : size) labels.push_back(label);
  out_shape.clear();
  for (char l : output) out_shape.push_back(size[l]);
  int64_t out_count = 1;
  for (int64_t d : out_shape) out_count *= d;
  std::vector<double> out(static_cast<size_t>(out_count), 0.0);
  std::map<char, int64_t> at;
  for (char l : labels) at[l] = 0;
  for (;;) {
    double product = 1;
    for (size_t t = 0; t < terms.size(); ++t) {
      int64_t flat = 0;
      for (size_t a = 0; a < terms[t].size(); ++a) {
        const int64_t d = c.shapes[t][a];
        flat = flat * d + (d == 1 ? 0 : at[terms[t][a]]);
      }
      product *= values[t][size_t(flat)];
    }
    int64_t o = 0;
    for (char l : output) o = o * size[l] + at[l];
    out[size_t(o)] += product;
    size_t k = labels.size();
    while (k > 0 && ++at[labels[k - 1]] == size[labels[k - 1]]) at[labels[--k]] = 0;
    if (k == 0) return out;
  }
}

TEST(OnnxEinsumTest, MatchesSummingEveryAssignment) {
  const std::vector<Case> cases = {
      {"ij,jk->ik", "ij,jk->ik", {{3, 4}, {4, 2}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"i,i", "i,i->", {{5}, {5}}},
      {"ij->", "ij->", {{3, 4}}},
      {"ij->ji", "ij->ji", {{3, 4}}},
      {"ij", "ij->ij", {{3, 4}}},
      {"ji", "ji->ij", {{3, 4}}},
      {"ii->i", "ii->i", {{4, 4}}},
      {"ii", "ii->", {{4, 4}}},
      {"iij->j", "iij->j", {{3, 3, 2}}},
      {"...ii->...i", "xii->xi", {{3, 4, 4}}},
      {"i,j->ij", "i,j->ij", {{3}, {4}}},
      {"ij,ij->ij", "ij,ij->ij", {{3, 4}, {3, 4}}},
      {"bij,jk", "bij,jk->bik", {{2, 3, 4}, {4, 5}}},
      {"abc,cd,de->abe", "abc,cd,de->abe", {{2, 3, 4}, {4, 2}, {2, 3}}},
      {"i,i,i->i", "i,i,i->i", {{4}, {4}, {4}}},
      {"ijk,ikj->i", "ijk,ikj->i", {{2, 3, 4}, {2, 4, 3}}},
      {"...ij,...jk->...ik", "xyij,yjk->xyik", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"...j,j...->...", "xj,jx->x", {{3, 4}, {4, 3}}},
      {"i...,i...", "ixy,iy->xy", {{2, 3, 4}, {2, 4}}},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.equation);
    onnx::ModelProto m = testing::model_with_opset(12);
    onnx::GraphProto& g = *m.mutable_graph();
    std::vector<std::string> names;
    std::vector<std::vector<float>> values;
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      names.push_back(str_cat("x", i));
      std::vector<std::string> dims;
      int64_t count = 1;
      for (int64_t d : c.shapes[i]) {
        dims.push_back(str_cat(d));
        count *= d;
      }
      testing::add_input(g, names.back(), dims);
      std::vector<float> v(static_cast<size_t>(count));
      for (float& e : v) e = uniform(rng);
      values.push_back(v);
      inputs.push_back(Tensor::from_vector<float>(v, Shape(c.shapes[i])));
    }
    testing::set_attribute(testing::add_node(g, "Einsum", names, {"y"}), "equation", c.equation);
    g.add_output()->set_name("y");
    const LoadedModel model = import_onnx(testing::bytes_of(m), "einsum.onnx");
    const Tensor y = model.run(inputs).at(0);
    std::vector<int64_t> want_shape;
    const std::vector<double> want = reference_einsum(c, values, want_shape);
    ASSERT_EQ(y.shape(), Shape(want_shape));
    const std::vector<float> got = y.to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
  }
}

TEST(OnnxEinsumTest, BadEquationsAreRefused) {
  for (const auto& [equation, why] : std::vector<std::pair<std::string, std::string>>{
           {"ij,jk->ik", "has 2 terms for 1 inputs"},
           {"ijk->i", "a term has 3 labels for an operand of rank 2"},
           {"ij->k", "output label k is in no input"},
           {"ij->ii", "output label i repeats"},
           {"i1->i", "has the character '1'"}}) {
    SCOPED_TRACE(equation);
    onnx::ModelProto m = testing::model_with_opset(12);
    onnx::GraphProto& g = *m.mutable_graph();
    testing::add_input(g, "x", {"3", "4"});
    testing::set_attribute(testing::add_node(g, "Einsum", {"x"}, {"y"}), "equation", equation);
    g.add_output()->set_name("y");
    try {
      import_onnx(testing::bytes_of(m), "einsum.onnx");
      ADD_FAILURE() << "imported";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(why), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("Einsum"), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace tandem
