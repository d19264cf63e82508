// TensorObserver: what a tracer needs to see of Tensor besides op dispatch.
//
// The tracer (trace/tracer.h) records ops through kernels' dispatch
// observers, but three things happen to tensors without an op:
//   * a value is read on the host (to_vector, item, to_string, wait_to_read),
//     which a trace cannot follow: the traced code could branch on it;
//   * a tensor is rebound in place with assign_ (an optimizer's update, a
//     running statistic), which a replay must repeat;
//   * a view is made (Tensor::reshape, slice, select), which a graph must
//     compute with a node, best recorded where the user made it.
// An observer installed on a thread sees both, for that thread only.
#pragma once

#include <source_location>

namespace tandem {

class Tensor;

class TensorObserver {
 public:
  virtual ~TensorObserver() = default;
  // Called before `tensor`'s value is read by `what` ("item", ...); may throw
  // to refuse the read.
  virtual void on_value_read(const Tensor& tensor, const char* what,
                             const std::source_location& where) = 0;
  // Called after `target` (and every handle sharing it) was rebound to
  // `value`'s data by Tensor::assign_.
  virtual void on_assign(const Tensor& target, const Tensor& value) = 0;
  // Called after `view` was made from `base` by Tensor::reshape, slice or
  // select at `where`. Does nothing unless overridden.
  virtual void on_view(const Tensor& /*view*/, const Tensor& /*base*/,
                       const std::source_location& /*where*/) {}
};

// Installs `observer` on this thread for the scope's lifetime (replacing, and
// then restoring, any observer installed before).
class TensorObserverScope {
 public:
  explicit TensorObserverScope(TensorObserver* observer);
  ~TensorObserverScope();
  TensorObserverScope(const TensorObserverScope&) = delete;
  TensorObserverScope& operator=(const TensorObserverScope&) = delete;

 private:
  TensorObserver* previous_;
};

// This thread's observer, or null.
TensorObserver* current_tensor_observer();

}  // namespace tandem
