#include "eager/nn/sequential.h"

namespace tandem::nn {

void Sequential::push_back(std::shared_ptr<Module> module) {
  push_back(std::to_string(modules_.size()), std::move(module));
}

void Sequential::push_back(const std::string& name, std::shared_ptr<Module> module) {
  modules_.push_back(register_module(name, std::move(module)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const std::source_location where = call_site();
  for (const auto& module : modules_) y = (*module)(y, where);
  return y;
}

const std::shared_ptr<Module>& Sequential::operator[](size_t index) const {
  TANDEM_CHECK(index < modules_.size(), "Sequential index ", index, " is out of range for ",
               modules_.size(), " modules");
  return modules_[index];
}

}  // namespace tandem::nn
