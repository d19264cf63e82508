// What the fuzz targets that run graphs share (graph_json_fuzz.cc,
// model_fuzz.cc): a work budget, so that a small file declaring huge tensors
// is parsed and checked but not run, and a run on made-up inputs whose every
// failure must be a tandem::Error.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "serialization/model.h"
#include "tests/fuzz/fuzz_util.h"
#include "trace/graph.h"

namespace tandem::fuzz {

// Elements of all a graph's values together (inputs, params, every node's
// outputs); the loader's passes and one run touch about this many. Above
// it, a run would take seconds under the sanitizers: the file is only
// parsed.
inline constexpr int64_t kMaxRunElements = int64_t{1} << 18;

inline bool within_run_budget(const trace::Graph& graph) {
  int64_t total = 0;
  for (const trace::Value& value : graph.values) {
    if (__builtin_add_overflow(total, value.shape.numel(), &total) || total > kMaxRunElements) {
      return false;
    }
  }
  return true;
}

// A tensor of `shape` and `dtype` holding small values that most ops
// accept: floats in [-0.75, 0.75], integers 0..3 (valid indices into most
// axes, not all), bools alternating.
inline Tensor made_up_tensor(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < shape.numel(); ++i) {
    const auto small = static_cast<int>(i % 4);
    switch (dtype) {
      case DType::kFloat32:
        reinterpret_cast<float*>(bytes)[i] = 0.25f * static_cast<float>(i % 7 - 3);
        break;
      case DType::kFloat64:
        reinterpret_cast<double*>(bytes)[i] = 0.25 * static_cast<double>(i % 7 - 3);
        break;
      case DType::kFloat16:  // 1.0 and 0.0
      case DType::kBFloat16: {
        const uint16_t one = dtype == DType::kFloat16 ? 0x3C00 : 0x3F80;
        reinterpret_cast<uint16_t*>(bytes)[i] = i % 2 ? one : 0;
        break;
      }
      case DType::kInt32:
        reinterpret_cast<int32_t*>(bytes)[i] = small;
        break;
      case DType::kInt64:
        reinterpret_cast<int64_t*>(bytes)[i] = small;
        break;
      case DType::kUInt8:
        bytes[i] = static_cast<uint8_t>(small);
        break;
      case DType::kBool:
        bytes[i] = static_cast<uint8_t>(i % 2);
        break;
    }
  }
  return t;
}

// Runs `model` once on made-up inputs of its signature (the traced shapes)
// and waits for every output. An Error is the right answer to a graph that
// cannot run; an internal assertion is a finding (fuzz_util.h).
inline void run_once(const LoadedModel& model, std::string_view kind) {
  std::vector<Tensor> inputs;
  for (const LoadedModel::TensorSpec& spec : model.inputs()) {
    inputs.push_back(made_up_tensor(spec.shape, spec.dtype));
  }
  try {
    for (const Tensor& output : model.run(inputs)) output.wait_to_read();
  } catch (const Error& e) {
    expect_user_error(e, kind);
  }
}

}  // namespace tandem::fuzz
