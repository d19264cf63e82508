#include "eager/nn/containers.h"

#include "absl/strings/str_join.h"

namespace tandem::nn {

void ModuleList::push_back(const std::string& name, std::shared_ptr<Module> module) {
  modules_.push_back(register_module(name, std::move(module)));
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t index) const {
  TANDEM_CHECK(index < modules_.size(), type_name(), " index ", index, " is out of range for ",
               modules_.size(), " modules");
  return modules_[index];
}

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [key, child] : named_children()) {
    if (key == name) return true;
  }
  return false;
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& name) const {
  for (const auto& [key, child] : named_children()) {
    if (key == name) return child;
  }
  throw Error(
      str_cat("ModuleDict has no module '", name, "'; its keys: ", absl::StrJoin(keys(), ", ")));
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> names;
  for (const auto& [key, child] : named_children()) names.push_back(key);
  return names;
}

}  // namespace tandem::nn
