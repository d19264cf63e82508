// InlineFunction<R(Args...), N>: a move-only std::function that keeps callables
// of up to N bytes inside itself, so pushing an op allocates nothing.
//
//   InlineFunction<void(int), 64> f = [t = tensor](int i) { ... };
//   f(3);
//
// A larger callable still works: it is moved to the heap (one allocation).
// Kernel closures capture a few tensor handles (16 bytes each) and some
// attributes, which fits the engine's size with room to spare.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace tandem::engine {

template <class Signature, size_t kInlineBytes>
class InlineFunction;

template <class R, class... Args, size_t kInlineBytes>
class InlineFunction<R(Args...), kInlineBytes> {
 public:
  InlineFunction() = default;

  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, InlineFunction> &&
                                              std::is_invocable_r_v<R, std::decay_t<F>&, Args...>>>
  InlineFunction(F&& f) {  // NOLINT(google-explicit-constructor): used like std::function.
    using Callable = std::decay_t<F>;
    if constexpr (fits_inline<Callable>()) {
      new (storage_) Callable(std::forward<F>(f));
      invoke_ = [](void* s, Args... args) -> R {
        return (*static_cast<Callable*>(s))(std::forward<Args>(args)...);
      };
      manage_ = [](void* from, void* to) {
        auto* source = static_cast<Callable*>(from);
        if (to) new (to) Callable(std::move(*source));
        source->~Callable();
      };
    } else {
      *reinterpret_cast<Callable**>(storage_) = new Callable(std::forward<F>(f));
      invoke_ = [](void* s, Args... args) -> R {
        return (**static_cast<Callable**>(s))(std::forward<Args>(args)...);
      };
      manage_ = [](void* from, void* to) {
        auto** source = static_cast<Callable**>(from);
        if (to) {
          *static_cast<Callable**>(to) = *source;
        } else {
          delete *source;
        }
      };
    }
  }

  InlineFunction(InlineFunction&& other) noexcept { take(other); }
  InlineFunction& operator=(InlineFunction&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  InlineFunction(const InlineFunction&) = delete;
  InlineFunction& operator=(const InlineFunction&) = delete;
  ~InlineFunction() { reset(); }

  explicit operator bool() const { return invoke_ != nullptr; }

  R operator()(Args... args) { return invoke_(storage_, std::forward<Args>(args)...); }

  // Destroys the held callable (and what it captured) now.
  void reset() {
    if (manage_) manage_(storage_, nullptr);
    invoke_ = nullptr;
    manage_ = nullptr;
  }

  template <class Callable>
  static constexpr bool fits_inline() {
    return sizeof(Callable) <= kInlineBytes && alignof(Callable) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Callable>;
  }

 private:
  void take(InlineFunction& other) {
    if (other.manage_) other.manage_(other.storage_, storage_);
    invoke_ = other.invoke_;
    manage_ = other.manage_;
    other.invoke_ = nullptr;
    other.manage_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
  R (*invoke_)(void*, Args...) = nullptr;
  // Moves the callable from `from` into `to` and destroys the source;
  // with `to` == nullptr, only destroys.
  void (*manage_)(void* from, void* to) = nullptr;
};

}  // namespace tandem::engine
