// Containers of modules, as torch::nn's: ModuleList holds modules in order,
// ModuleDict by name. Their children's parameters are registered ("0.weight",
// "encoder.weight"), so optimizers, state_dict and to() see them; neither has
// a forward: the module that owns one calls its children as it needs.
//
//   struct Blocks : nn::Module {
//     Blocks() {
//       layers = register_module("layers", std::make_shared<nn::ModuleList>());
//       for (int i = 0; i < 4; ++i) layers->push_back(nn::Linear(16, 16));
//     }
//     Tensor forward(const Tensor& x) override {
//       Tensor y = x;
//       for (size_t i = 0; i < layers->size(); ++i) y = relu((*(*layers)[i])(y));
//       return y;
//     }
//     std::shared_ptr<nn::ModuleList> layers;
//   };
//
// nn::Sequential (sequential.h) is a ModuleList whose forward chains its
// modules.
#pragma once

#include <concepts>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "eager/nn/module.h"

namespace tandem::nn {

// A module argument: a shared_ptr to a Module, or a Module moved in by value.
template <class M>
concept ModuleArg = std::convertible_to<M, std::shared_ptr<Module>> ||
    (std::derived_from<std::remove_cvref_t<M>, Module> && !std::is_lvalue_reference_v<M>);

// A module passed by value becomes a new shared_ptr; a shared_ptr is shared.
template <ModuleArg M>
std::shared_ptr<Module> module_pointer(M&& module) {
  if constexpr (std::convertible_to<M, std::shared_ptr<Module>>) {
    return std::forward<M>(module);
  } else {
    return std::make_shared<std::remove_cvref_t<M>>(std::move(module));
  }
}

class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <ModuleArg... Ms>
  requires(sizeof...(Ms) > 0) explicit ModuleList(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Appends `module` under the name str(size()), or under `name`.
  template <ModuleArg M>
  void push_back(M&& module) {
    push_back(std::to_string(modules_.size()), module_pointer(std::forward<M>(module)));
  }
  void push_back(const std::string& name, std::shared_ptr<Module> module);

  std::string type_name() const override { return "ModuleList"; }

  size_t size() const { return modules_.size(); }
  // The module at `index`; throws tandem::Error when out of range.
  const std::shared_ptr<Module>& operator[](size_t index) const;
  // The module at `index` as an M; throws tandem::Error if it is not one.
  template <class M>
  std::shared_ptr<M> at(size_t index) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[index]);
    TANDEM_CHECK(typed != nullptr, type_name(), "::at(", index, "): the module is a ",
                 (*this)[index]->type_name(), ", not the type asked for");
    return typed;
  }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleDict : public Module {
 public:
  // Adds `module` under `name` (a valid, new child name: Note [Parameter
  // names are the one mapping] in module.h); returns it.
  template <ModuleArg M>
  std::shared_ptr<Module> insert(const std::string& name, M&& module) {
    return register_module(name, module_pointer(std::forward<M>(module)));
  }

  std::string type_name() const override { return "ModuleDict"; }

  size_t size() const { return named_children().size(); }
  bool contains(const std::string& name) const;
  // The module named `name`; throws tandem::Error naming it and the keys
  // when there is none.
  std::shared_ptr<Module> operator[](const std::string& name) const;
  // The names, in insertion order.
  std::vector<std::string> keys() const;
};

}  // namespace tandem::nn
