#include "eager/optim/sgd.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"

namespace tandem::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  TANDEM_CHECK(options.momentum >= 0, "SGD: momentum must be >= 0, got ", options.momentum);
  TANDEM_CHECK(options.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ",
               options.weight_decay);
  TANDEM_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
               "SGD: nesterov momentum needs momentum > 0 and dampening == 0, got momentum ",
               options.momentum, " and dampening ", options.dampening);
  momentum_buffers_.resize(params_.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (o.weight_decay != 0) g = add(g, mul(p, o.weight_decay));
    if (o.momentum != 0) {
      Tensor& buf = momentum_buffers_[i];
      buf = buf.defined() ? add(mul(buf, o.momentum), mul(g, 1 - o.dampening)) : g;
      g = o.nesterov ? add(g, mul(buf, o.momentum)) : buf;
    }
    p.assign_(sub(p, mul(g, lr())));
  }
}

}  // namespace tandem::optim
