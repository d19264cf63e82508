#include "core/eager_hooks.h"

#include <atomic>

#include "core/error.h"

namespace tandem {
namespace {

// Constant-initialized, so a static initializer anywhere may read it.
std::atomic<const EagerHooks*> installed_hooks{nullptr};

}  // namespace

void set_eager_hooks(const EagerHooks* hooks) {
  installed_hooks.store(hooks, std::memory_order_release);
}

const EagerHooks& eager_hooks(const char* method) {
  const EagerHooks* hooks = installed_hooks.load(std::memory_order_acquire);
  TANDEM_CHECK(hooks != nullptr, "Tensor::", method,
               "() is implemented by tandem::eager (autograd and the to_device op), which this "
               "program does not link; link tandem::eager or tandem::tandem");
  return *hooks;
}

}  // namespace tandem
