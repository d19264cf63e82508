// StateDict: a model's parameters and buffers by name, and a simple binary
// file for them.
//
//   nn::StateDict state = net->state_dict();     // "fc1.weight" -> Tensor, ...
//   nn::write_state_dict("net.tsd", state);
//   fresh->load_state_dict(nn::read_state_dict("net.tsd"));
//   // or simply: net->save("net.tsd"); fresh->load("net.tsd");
//
// Note [State dict file format, TNDMSD01]
// A stopgap until the shared params format (serialization/) replaces it. All
// integers little-endian; tensors are CPU, contiguous, raw little-endian bytes.
//
//   offset  size          field
//   0       8             magic "TNDMSD01"
//   8       u64           count: number of tensors
//   then, per tensor, in state_dict order:
//           u64           name length L (1..4096)
//           L             name, UTF-8, unique in the file
//           u8            dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16,
//                         4 int32, 5 int64, 6 uint8, 7 bool (tandem::DType)
//           u32           rank R (0..64)
//           R * i64       dims, each >= 0
//           u64           byte length: numel * dtype size, exactly
//           byte length   the elements
//   end of file: nothing may follow the last tensor.
//
// Reading trusts nothing: every field is bounds-checked against the file's
// size before it is read, and a bad file throws tandem::Error naming the file,
// the byte offset and what was expected there, never reading out of bounds.
// Writing goes to "<path>.tmp-<random>" and is renamed over `path` only once
// complete, so a failed or interrupted save never leaves a half-written file
// under `path`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "core/tensor.h"

namespace tandem::nn {

// An insertion-ordered map from name to tensor.
class StateDict {
 public:
  using Entry = std::pair<std::string, Tensor>;

  // Adds `name`; throws tandem::Error if it is already present.
  void insert(const std::string& name, Tensor tensor);
  bool contains(const std::string& name) const { return index_.contains(name); }
  // The tensor named `name`; throws tandem::Error naming it when absent.
  const Tensor& at(const std::string& name) const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  // The names, in insertion order.
  std::vector<std::string> keys() const;

  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// Writes `state` to `path` in the TNDMSD01 format (waits for the tensors'
// values). Throws tandem::Error naming the path if it cannot be written, or
// naming the key of a non-CPU tensor.
void write_state_dict(const std::string& path, const StateDict& state);

// Reads a TNDMSD01 file into CPU tensors. Throws tandem::Error naming the
// file and byte offset for a missing, truncated or malformed file.
StateDict read_state_dict(const std::string& path);

}  // namespace tandem::nn
