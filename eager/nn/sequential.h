// nn::Sequential: runs its modules one after another, each one's output the
// next one's input, as torch::nn::Sequential.
//
//   auto net = std::make_shared<nn::Sequential>(
//       nn::Conv2d(1, 8, 3, 1, 1), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
//       nn::Flatten(), nn::Linear(8 * 14 * 14, 10));
//   Tensor logits = net->forward(images);        // [N, 1, 28, 28] -> [N, 10]
//   net->named_parameters();                     // "0.weight", "0.bias", "1.weight", ...
//   auto conv = net->at<nn::Conv2d>(0);          // typed access to a child
//
// Modules are passed by value (moved into a new shared_ptr) or as a
// std::shared_ptr (shared, e.g. to keep a handle on a layer). Children are
// named by their position, "0", "1", ... unless push_back is given a name.
// An empty Sequential is the identity.
#pragma once

#include <concepts>
#include <memory>
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

class Sequential : public Module {
 public:
  Sequential() = default;
  template <ModuleArg... Ms>
  requires(sizeof...(Ms) > 0) explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Appends `module` under the name str(size()), or under `name`.
  void push_back(std::shared_ptr<Module> module);
  void push_back(const std::string& name, std::shared_ptr<Module> module);
  template <class M>
  requires std::derived_from<std::remove_cvref_t<M>, Module> &&
      (!std::is_lvalue_reference_v<M>)void push_back(M&& module) {
    push_back(std::make_shared<std::remove_cvref_t<M>>(std::move(module)));
  }

  // Each module's forward, in order.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }

  size_t size() const { return modules_.size(); }
  // The module at `index`; throws tandem::Error when out of range.
  const std::shared_ptr<Module>& operator[](size_t index) const;
  // The module at `index` as an M; throws tandem::Error if it is not one.
  template <class M>
  std::shared_ptr<M> at(size_t index) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[index]);
    TANDEM_CHECK(typed != nullptr, "Sequential::at(", index, "): the module is a ",
                 (*this)[index]->type_name(), ", not the type asked for");
    return typed;
  }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace tandem::nn
