#include "eager/nn/state_dict.h"

#include "core/error.h"
#include "serialization/params.h"

namespace tandem::nn {

void StateDict::insert(const std::string& name, Tensor tensor) {
  TANDEM_CHECK(!contains(name), "state dict already has an entry '", name, "'");
  index_.emplace(name, entries_.size());
  entries_.emplace_back(name, std::move(tensor));
}

const Tensor& StateDict::at(const std::string& name) const {
  auto it = index_.find(name);
  TANDEM_CHECK(it != index_.end(), "state dict has no entry '", name, "'");
  return entries_[it->second].second;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) out.push_back(entry.first);
  return out;
}

void write_state_dict(const std::string& path, const StateDict& state) {
  std::vector<serialization::NamedTensor> tensors;
  tensors.reserve(state.size());
  for (const auto& [name, tensor] : state) {
    tensors.push_back({name, tensor.defined() ? tensor.to(Device::cpu()) : tensor});
  }
  serialization::write_params(path, tensors);
}

StateDict read_state_dict(const std::string& path) {
  StateDict state;
  // The params reader has refused duplicate names, so insert cannot throw.
  for (auto& [name, tensor] : serialization::read_params(path).tensors) {
    state.insert(name, std::move(tensor));
  }
  return state;
}

}  // namespace tandem::nn
