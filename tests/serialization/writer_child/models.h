// The two models the kill tests write (tests/serialization/kill_test.cc and
// writer_child.cc): one small architecture with weights from two seeds, so
// that a file tells which one it holds. Small on purpose: the graph file is
// larger than the params file, so a limit on file size can stop an export
// in either file.
#pragma once

#include <memory>

#include "tandem/tandem.h"

namespace tandem::testing {

inline std::shared_ptr<nn::Module> writer_model(int which) {
  manual_seed(1000 + static_cast<uint64_t>(which));
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(16, 8), nn::ReLU(),
                                          nn::Linear(8, 4));
}

inline Tensor writer_model_input() {
  manual_seed(7);
  return randn({3, 1, 4, 4});
}

// Hybridizes `model` and calls it once, as export_model needs.
inline void prepare_export(nn::Module& model) {
  model.hybridize();
  NoGradGuard no_grad;
  model(writer_model_input());
}

}  // namespace tandem::testing
