#include "distributed/data_parallel.h"

#include <utility>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"

#include "distributed/collectives.h"

namespace tandem::distributed {
namespace {

// Parameters in reverse registration order, consecutive ones of one dtype
// together until a bucket holds cap_bytes (Note [Buckets overlap backward]).
std::vector<std::vector<size_t>> make_buckets(const std::vector<Tensor>& parameters,
                                              double cap_mb) {
  TANDEM_CHECK(cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ", cap_mb);
  const double cap_bytes = cap_mb * 1024 * 1024;
  std::vector<std::vector<size_t>> buckets;
  double bytes = 0;
  for (size_t k = parameters.size(); k-- > 0;) {
    const Tensor& p = parameters[k];
    const bool fits = !buckets.empty() && bytes + static_cast<double>(p.nbytes()) <= cap_bytes &&
                      parameters[buckets.back().front()].dtype() == p.dtype();
    if (!fits) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(k);
    bytes += static_cast<double>(p.nbytes());
  }
  return buckets;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 DataParallelOptions options)
    : module_(std::move(module)), options_(options) {
  TANDEM_CHECK(module_ != nullptr, "DistributedDataParallel: no module given");
  TANDEM_CHECK(options_.group.contains_me(),
               "DistributedDataParallel: this rank is not a member of process group ",
               options_.group.id());
  for (const auto& [name, p] : module_->named_parameters()) {
    TANDEM_CHECK(p.device().is_cpu(), "DistributedDataParallel: parameter '", name, "' is on ",
                 p.device().to_string(), "; only CPU tensors travel through MPI");
    names_.push_back(name);
    parameters_.push_back(p);
  }
  {
    // Every replica starts from rank 0's weights (and running statistics).
    NoGradGuard no_grad;
    for (Tensor& p : parameters_) p.assign_(broadcast(p, 0, options_.group));
    for (Tensor b : module_->buffers()) b.assign_(broadcast(b, 0, options_.group));
  }
  buckets_ = make_buckets(parameters_, options_.bucket_cap_mb);
  seen_grads_.resize(parameters_.size(), nullptr);
  for (size_t k = 0; k < parameters_.size(); ++k) {
    seen_grads_[k] = parameters_[k].grad().impl_ptr().get();
  }
  hook_ = add_post_backward_hook([this] { average_gradients(); });
}

DistributedDataParallel::~DistributedDataParallel() { remove_post_backward_hook(hook_); }

Tensor DistributedDataParallel::operator()(const Tensor& x, std::source_location where) {
  if (options_.broadcast_buffers && options_.group.size() > 1) broadcast_buffers();
  return (*module_)(x, where);
}

void DistributedDataParallel::broadcast_buffers() {
  NoGradGuard no_grad;
  std::vector<Tensor> buffers = module_->buffers();
  // One broadcast per dtype: the buffers of that dtype flattened together.
  std::vector<bool> done(buffers.size(), false);
  for (size_t first = 0; first < buffers.size(); ++first) {
    if (done[first]) continue;
    std::vector<size_t> same;
    std::vector<Tensor> flat;
    std::vector<int64_t> sizes;
    for (size_t k = first; k < buffers.size(); ++k) {
      if (done[k] || buffers[k].dtype() != buffers[first].dtype()) continue;
      done[k] = true;
      same.push_back(k);
      flat.push_back(reshape(buffers[k], {-1}));
      sizes.push_back(buffers[k].numel());
    }
    Tensor theirs = broadcast(flat.size() == 1 ? flat[0] : concat(flat), 0, options_.group);
    std::vector<Tensor> parts =
        same.size() == 1 ? std::vector<Tensor>{theirs} : split(theirs, sizes);
    for (size_t i = 0; i < same.size(); ++i) {
      Tensor& buffer = buffers[same[i]];
      const Shape& shape = buffer.shape();
      buffer.assign_(reshape(parts[i], Dims(shape.begin(), shape.end())));
    }
  }
}

void DistributedDataParallel::average_gradients() {
  if (!syncing_) return;
  std::vector<Tensor> grads(parameters_.size());
  std::vector<bool> fresh(parameters_.size(), false);
  bool any = false;
  for (size_t k = 0; k < parameters_.size(); ++k) {
    grads[k] = parameters_[k].grad();
    fresh[k] = grads[k].defined() && grads[k].impl_ptr().get() != seen_grads_[k];
    any = any || fresh[k];
  }
  if (!any) return;  // A backward of another model.
  for (size_t k = 0; k < parameters_.size(); ++k) {
    if (fresh[k]) continue;
    TANDEM_CHECK(options_.find_unused_parameters, "DistributedDataParallel: parameter '", names_[k],
                 "' got no gradient in this backward, so the ranks cannot average it; pass "
                 "find_unused_parameters = true if a step may leave parameters unused");
    const Shape& shape = parameters_[k].shape();
    grads[k] = zeros(Dims(shape.begin(), shape.end()), parameters_[k].dtype());
  }
  for (const std::vector<size_t>& bucket : buckets_) {
    std::vector<Tensor> flat;
    std::vector<int64_t> sizes;
    for (size_t k : bucket) {
      flat.push_back(reshape(grads[k], {-1}));
      sizes.push_back(grads[k].numel());
    }
    Tensor averaged =
        all_reduce(flat.size() == 1 ? flat[0] : concat(flat), ReduceOp::kMean, options_.group);
    std::vector<Tensor> parts =
        bucket.size() == 1 ? std::vector<Tensor>{averaged} : split(averaged, sizes);
    for (size_t i = 0; i < bucket.size(); ++i) {
      const size_t k = bucket[i];
      const Shape& shape = parameters_[k].shape();
      Tensor grad = reshape(parts[i], Dims(shape.begin(), shape.end()));
      seen_grads_[k] = grad.impl_ptr().get();
      set_grad(parameters_[k], std::move(grad));
    }
  }
}

}  // namespace tandem::distributed
