// What the trace/ tests share: the op lookup, random inputs made with ops,
// and running two graphs side by side.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "trace/executor.h"
#include "trace/graph.h"

namespace tandem::trace::testing {

inline const kernels::OpDef& op_def(const char* name) {
  return kernels::Registry::global().get(name);
}

// float32, uniform in [low, low + 1), a function of `seed`.
inline Tensor random_tensor(const Shape& shape, int64_t seed, double low = -0.5) {
  std::vector<int64_t> dims(shape.begin(), shape.end());
  Tensor u = kernels::call1("rand", {}, {{"shape", dims}, {"seed", seed}});
  return kernels::call1(
      "add", {u, kernels::call1("full", {}, {{"shape", std::vector<int64_t>{}}, {"value", low}})});
}

inline int count_op(const Graph& g, const char* name) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                        [&](const Node& n) { return n.op->name == name; }));
}

// Runs both graphs (float32 outputs) on `inputs` through the executor and
// expects equal outputs within `rtol` (relative to max(1, |value|)).
inline void expect_same_results(Graph original, Graph rewritten, const std::vector<Tensor>& inputs,
                                double rtol) {
  std::vector<Tensor> want = Executor(std::move(original)).run(inputs);
  std::vector<Tensor> got = Executor(std::move(rewritten)).run(inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    std::vector<float> w = want[o].to_vector<float>(), g = got[o].to_vector<float>();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(g[i], w[i], rtol * std::max(1.0f, std::abs(w[i])))
          << "output " << o << " at " << i;
    }
  }
}

}  // namespace tandem::trace::testing
