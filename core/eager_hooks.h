// EagerHooks: how Tensor's autograd methods and to(device) reach eager.
//
// Note [Eager hooks]
// Users expect `w.requires_grad_()`, `loss.backward()`, `w.grad()` and
// `x.to(device)` as methods, as in PyTorch. What makes them work lives in
// eager: the autograd tape (eager/autograd.h) and the to_device op, which
// must be dispatched so that autograd and the tracer see it. Core cannot
// depend on eager, so core defines these methods as calls through an
// EagerHooks object that eager installs when it is linked, the way ATen
// reaches torch's autograd through its VariableHooksInterface. A program
// built on core alone gets a tandem::Error from them, never a link error or
// a silent no-op.
#pragma once

#include <source_location>

#include "core/device.h"

namespace tandem {

class Tensor;

class EagerHooks {
 public:
  virtual ~EagerHooks() = default;
  virtual void set_requires_grad(const Tensor& tensor, bool requires_grad) const = 0;
  virtual bool requires_grad(const Tensor& tensor) const = 0;
  virtual Tensor grad(const Tensor& tensor) const = 0;
  virtual void zero_grad(const Tensor& tensor) const = 0;
  virtual void backward(const Tensor& tensor, const Tensor& gradient, bool retain_graph) const = 0;
  virtual Tensor to(const Tensor& tensor, Device device,
                    const std::source_location& where) const = 0;
};

// Installs `hooks` for the process (eager does, while it is initialized);
// `hooks` must outlive every call.
void set_eager_hooks(const EagerHooks* hooks);

// The installed hooks; throws a tandem::Error naming `method` if there are
// none (the program does not link tandem::eager).
const EagerHooks& eager_hooks(const char* method);

}  // namespace tandem
