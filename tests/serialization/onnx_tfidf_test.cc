// ONNX's TfIdfVectorizer through the importer (serialization/onnx_tfidf.cc)
// against a reference that walks every n-gram of every row, for each mode,
// with and without weights, on random rows and pools.
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

TEST(OnnxTfIdfTest, CountsEveryNGramOfEveryRow) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> token(0, 3);
  const int64_t rows = 3, length = 9;
  std::vector<int64_t> x(size_t(rows * length));
  for (int64_t& t : x) t = token(rng);
  // Pool: 3 unigrams, 4 bigrams, 2 trigrams; outputs permuted, two left empty.
  std::vector<std::vector<int64_t>> grams;
  for (int64_t g = 1; g <= 3; ++g) {
    for (int64_t k = 0; k < (g == 1 ? 3 : g == 2 ? 4 : 2); ++k) {
      std::vector<int64_t> gram;
      for (int64_t i = 0; i < g; ++i) gram.push_back(token(rng));
      grams.push_back(gram);
    }
  }
  std::vector<int64_t> pool, indexes;
  for (const auto& gram : grams) pool.insert(pool.end(), gram.begin(), gram.end());
  for (size_t j = 0; j < grams.size(); ++j) indexes.push_back(int64_t((j * 7) % 11));
  std::vector<float> weights;
  for (size_t j = 0; j < grams.size(); ++j) weights.push_back(0.5f + float(j));
  for (const std::string mode : {"TF", "IDF", "TFIDF"}) {
    for (const int64_t min_n : {1, 2}) {
      for (const int64_t skips : {0, 2}) {
        SCOPED_TRACE(str_cat(mode, ", min_gram_length ", min_n, ", max_skip_count ", skips));
        onnx::ModelProto m = testing::model_with_opset(9);
        onnx::GraphProto& g = *m.mutable_graph();
        testing::add_input(g, "x", {str_cat(rows), str_cat(length)});
        g.mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
            onnx::TensorProto_DataType_INT64);
        onnx::NodeProto* node = testing::add_node(g, "TfIdfVectorizer", {"x"}, {"y"});
        testing::set_attribute(node, "mode", mode);
        testing::set_attribute(node, "min_gram_length", min_n);
        testing::set_attribute(node, "max_gram_length", int64_t{3});
        testing::set_attribute(node, "max_skip_count", skips);
        testing::set_attribute(node, "pool_int64s", pool);
        testing::set_attribute(node, "ngram_counts", std::vector<int64_t>{0, 3, 11});
        testing::set_attribute(node, "ngram_indexes", indexes);
        onnx::AttributeProto* w = node->add_attribute();
        w->set_name("weights");
        w->set_type(onnx::AttributeProto_AttributeType_FLOATS);
        for (float v : weights) w->add_floats(v);
        g.add_output()->set_name("y");
        const Tensor y = import_onnx(testing::bytes_of(m), "tfidf.onnx")
                             .run({Tensor::from_vector<int64_t>(x, Shape{rows, length})})
                             .at(0);
        int64_t width = 0;
        for (int64_t i : indexes) width = std::max(width, i + 1);
        ASSERT_EQ(y.shape(), (Shape{rows, width}));
        const std::vector<float> got = y.to_vector<float>();
        for (int64_t r = 0; r < rows; ++r) {
          for (size_t j = 0; j < grams.size(); ++j) {
            const int64_t n = int64_t(grams[j].size());
            int64_t found = 0;
            if (n >= min_n) {
              for (int64_t s = 0; s <= (n == 1 ? 0 : skips); ++s) {
                for (int64_t t = 0; t + (n - 1) * (s + 1) < length; ++t) {
                  bool match = true;
                  for (int64_t k = 0; k < n; ++k) {
                    match = match && x[size_t(r * length + t + k * (s + 1))] == grams[j][size_t(k)];
                  }
                  found += match;
                }
              }
            }
            const double want = mode == "TF"    ? double(found)
                                : mode == "IDF" ? (found > 0 ? weights[j] : 0.0)
                                                : double(found) * weights[j];
            EXPECT_FLOAT_EQ(got[size_t(r * width + indexes[j])], float(want))
                << "row " << r << ", n-gram " << j;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem
