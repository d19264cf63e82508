#include "eager/optim/sgd.h"

#include <map>
#include <utility>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"
#include "eager/optim/update_programs.h"

namespace tandem::optim {
namespace {

// Note [SGD in two passes]
// Op by op, a momentum step is four elementwise passes over each parameter
// (buf * momentum, + g, g * lr, p - that), each writing a new tensor: on the
// standard MLP workload (bench_train) they were most of the step's own
// kernel time. As two fused_elementwise programs (Note [Fused elementwise
// programs], as Adam does, Note [Adam in three passes]) each tensor is read
// once per program. The instructions are the ops the unfused update calls,
// in the same order on the same constants, so the results are the same bits.
//
//   buf' = buf * momentum + g        (scaled by 1 - dampening where that applies)
//   p'   = p - g' * lr
constexpr const char* kMomentum = "r0=mul(i0,i1);r1=add(r0,i2)";

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  TANDEM_CHECK(options.momentum >= 0, "SGD: momentum must be >= 0, got ", options.momentum);
  TANDEM_CHECK(options.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ",
               options.weight_decay);
  TANDEM_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
               "SGD: nesterov momentum needs momentum > 0 and dampening == 0, got momentum ",
               options.momentum, " and dampening ", options.dampening);
  // See Note [Why optimizer state is tensors updated in place].
  momentum_buffers_.resize(params_.size());
  if (options.momentum == 0) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    momentum_buffers_[i] = zeros(Dims(p.shape().begin(), p.shape().end()), p.dtype(), p.device());
  }
  if (options.dampening != 0) steps_.emplace(params_.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  const SGDOptions& o = options_;
  std::vector<bool> updated(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) updated[i] = params_[i].grad().defined();
  if (steps_) steps_->advance(updated);
  // With dampening, g's weight in buf: 1 - dampening, but 1 on a parameter's
  // first step (buf = g there), as 1 - dampening * min(t - 1, 1), once per
  // step-count group and dtype.
  std::map<std::pair<size_t, DType>, Tensor> grad_scale;
  std::map<DType, Tensor> momentum;  // The momentum, once per dtype.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!updated[i]) continue;
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (o.weight_decay != 0) g = add(g, mul(p, o.weight_decay));
    if (o.momentum != 0) {
      const Tensor& buf = momentum_buffers_[i];
      follow_param_device(buf, i);
      Tensor scaled = g;
      if (steps_) {
        auto [it, is_new] = grad_scale.try_emplace({steps_->group(i), p.dtype()});
        if (is_new) {
          Tensor not_first = clip(sub(steps_->of(i), 1.0), 0, 1);  // 0 or 1
          it->second = cast(add(neg(mul(not_first, o.dampening)), 1.0), p.dtype());
        }
        scaled = mul(g, it->second);
      }
      auto [m, is_new] = momentum.try_emplace(p.dtype());
      if (is_new) m->second = full({}, o.momentum, p.dtype());
      buf.assign_(fused_update(kMomentum, {buf, m->second, scaled}));  // Note [SGD in two passes].
      g = o.nesterov ? add(g, mul(buf, o.momentum)) : buf;
    }
    p.assign_(fused_update(programs::kDescent, {p, g, lr_tensor(p.dtype())}));
  }
}

}  // namespace tandem::optim
