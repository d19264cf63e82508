#include "distributed/data_parallel.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

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

// The indices of `tensors` by dtype, each dtype's in order.
std::vector<std::vector<size_t>> by_dtype(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<size_t>> groups;
  for (size_t k = 0; k < tensors.size(); ++k) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const std::vector<size_t>& g) {
      return tensors[g.front()].dtype() == tensors[k].dtype();
    });
    if (same == groups.end()) {
      groups.push_back({k});
    } else {
      same->push_back(k);
    }
  }
  return groups;
}

// tensors[indices] through one collective: flattened and concatenated,
// `exchange`d, and split back into their shapes.
std::vector<Tensor> exchange_together(const std::vector<Tensor>& tensors,
                                      const std::vector<size_t>& indices,
                                      const std::function<Tensor(const Tensor&)>& exchange) {
  std::vector<Tensor> flat;
  std::vector<int64_t> sizes;
  for (size_t k : indices) {
    flat.push_back(tensors[k].reshape({-1}));
    sizes.push_back(tensors[k].numel());
  }
  Tensor exchanged = exchange(flat.size() == 1 ? flat[0] : concat(flat));
  std::vector<Tensor> parts =
      flat.size() == 1 ? std::vector<Tensor>{exchanged} : split(exchanged, sizes);
  for (size_t i = 0; i < indices.size(); ++i) {
    parts[i] = parts[i].reshape(tensors[indices[i]].shape().dims());
  }
  return parts;
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
  buffers_ = module_->buffers();
  buffer_groups_ = by_dtype(buffers_);
  group_size_ = options_.group.size();
  // Every replica starts from rank 0's weights and running statistics.
  broadcast_from_rank_0(parameters_, by_dtype(parameters_));
  broadcast_from_rank_0(buffers_, buffer_groups_);
  buckets_ = make_buckets(parameters_, options_.bucket_cap_mb);
  seen_grads_.resize(parameters_.size(), nullptr);
  for (size_t k = 0; k < parameters_.size(); ++k) {
    seen_grads_[k] = parameters_[k].grad().impl_ptr().get();
  }
  hook_ = add_post_backward_hook([this] { average_gradients(); });
}

DistributedDataParallel::~DistributedDataParallel() { remove_post_backward_hook(hook_); }

Tensor DistributedDataParallel::operator()(const Tensor& x, std::source_location where) {
  if (options_.broadcast_buffers && group_size_ > 1) {
    broadcast_from_rank_0(buffers_, buffer_groups_);
  }
  return (*module_)(x, where);
}

void DistributedDataParallel::broadcast_from_rank_0(
    std::vector<Tensor>& tensors, const std::vector<std::vector<size_t>>& groups) {
  NoGradGuard no_grad;
  for (const std::vector<size_t>& group : groups) {
    std::vector<Tensor> theirs = exchange_together(
        tensors, group, [&](const Tensor& x) { return broadcast(x, 0, options_.group); });
    for (size_t i = 0; i < group.size(); ++i) tensors[group[i]].assign_(theirs[i]);
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
    grads[k] = zeros(Dims(parameters_[k].shape().begin(), parameters_[k].shape().end()),
                     parameters_[k].dtype());
  }
  for (const std::vector<size_t>& bucket : buckets_) {
    std::vector<Tensor> averaged = exchange_together(grads, bucket, [&](const Tensor& x) {
      return all_reduce(x, ReduceOp::kMean, options_.group);
    });
    for (size_t i = 0; i < bucket.size(); ++i) {
      seen_grads_[bucket[i]] = averaged[i].impl_ptr().get();
      set_grad(parameters_[bucket[i]], std::move(averaged[i]));
    }
  }
}

}  // namespace tandem::distributed
