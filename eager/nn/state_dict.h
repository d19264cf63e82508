// StateDict: a model's parameters and buffers by name, and its checkpoint file.
//
//   nn::StateDict state = net->state_dict();     // "fc1.weight" -> Tensor, ...
//   nn::write_state_dict("net.params", state);
//   fresh->load_state_dict(nn::read_state_dict("net.params"));
//   // or simply: net->save("net.params"); fresh->load("net.params");
//
// A checkpoint is a params file (serialization/params.h; the byte layout is
// in serialization/FORMAT.md, "Params file"), the same format as an exported
// model's weights, with the state dict's keys as tensor names in state_dict
// order. Reading checks every byte and checksum, and a bad file throws
// tandem::Error naming the file, the byte offset and the tensor; writing is
// atomic, so a failed save leaves the old checkpoint as it was.
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

// Writes `state` to `path` as a params file (waits for the tensors' values).
// Tensors on a GPU are copied to the CPU first: a checkpoint names no device
// (Module::load_state_dict puts values on the model's device). Throws
// tandem::Error naming the path if it cannot be written.
void write_state_dict(const std::string& path, const StateDict& state);

// Reads a params file into CPU tensors. Throws tandem::Error naming the file
// and byte offset for a missing, truncated or malformed file.
StateDict read_state_dict(const std::string& path);

}  // namespace tandem::nn
