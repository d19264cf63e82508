// DistributedDataParallel: one model replica per rank, each on its own
// shard of every batch, their gradients averaged so that every replica
// takes the same step (torch.nn.parallel.DistributedDataParallel).
//
//   distributed::init();
//   auto net = std::make_shared<nn::Sequential>(...);
//   distributed::DistributedDataParallel ddp(net);  // rank 0's weights, everywhere
//   optim::SGD opt(net->parameters(), 0.1);
//   for (const data::Batch& batch : loader) {      // DistributedSampler's shard
//     Tensor loss = cross_entropy(ddp(batch[0]), batch[1]);
//     opt.zero_grad();
//     loss.backward();  // averages the gradients over the ranks
//     opt.step();
//   }
//
// Note [Buckets overlap backward]
// The parameters are grouped in reverse registration order (roughly the
// order backward produces their gradients) into buckets of at most
// bucket_cap_mb. When a backward() has pushed its gradient ops (autograd's
// post-backward hook; nothing is computed yet), each bucket's gradients are
// flattened into one tensor, all-reduced (mean) and split back: ops like any
// other, which the engine runs as soon as the bucket's gradients are
// written, while the worker goes on with the rest of backward (the
// collective does not hold it: Note [Ops that finish later] in
// core/engine/engine.h). No hook on each gradient and no thread of DDP's
// own: the dependency engine gives the overlap that torch's reducer builds
// by hand. In a hybridized training step the same ops are traced, so the
// all-reduces are nodes of the graph and replay with it.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <vector>

#include "eager/nn/module.h"

#include "distributed/distributed.h"

namespace tandem::distributed {

struct DataParallelOptions {
  // Most megabytes of gradients per all-reduce; a larger parameter gets a
  // bucket of its own.
  double bucket_cap_mb = 25;
  // Whether a backward may leave some parameters without a gradient (a
  // branch not taken): they then contribute zeros to the average. Off, such
  // a backward is an Error naming the parameter, as in torch.
  bool find_unused_parameters = false;
  // Before each forward, every rank takes rank 0's buffers (BatchNorm's
  // running statistics), as torch's broadcast_buffers: the replicas stay
  // identical, not only their parameters. One broadcast per dtype.
  bool broadcast_buffers = true;
  ProcessGroup group = ProcessGroup();
};

class DistributedDataParallel {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank (a collective:
  // every rank constructs its DDP at the same point).
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                   DataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The wrapped module's forward (hybridized or not), after rank 0's
  // buffers are broadcast (DataParallelOptions::broadcast_buffers).
  Tensor operator()(const Tensor& x, std::source_location where = std::source_location::current());
  nn::Module& module() { return *module_; }

  // While a NoSync is alive, backward() only accumulates this rank's
  // gradients (torch's no_sync()): micro-batches of a larger step. The
  // first backward after it averages what was accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp) { ddp_.syncing_ = false; }
    ~NoSync() { ddp_.syncing_ = true; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
  };

  // The buckets, as indices into module().parameters(), in all-reduce order.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

 private:
  // Autograd's post-backward hook: averages the gradients this backward made.
  void average_gradients();
  // Gives every rank rank 0's values of `tensors`, one broadcast per group
  // of indices (by_dtype's: one per dtype).
  void broadcast_from_rank_0(std::vector<Tensor>& tensors,
                             const std::vector<std::vector<size_t>>& groups);

  std::shared_ptr<nn::Module> module_;
  DataParallelOptions options_;
  std::vector<Tensor> parameters_;
  std::vector<std::string> names_;
  std::vector<Tensor> buffers_;
  std::vector<std::vector<size_t>> buffer_groups_;  // The buffers by dtype.
  int group_size_ = 1;
  std::vector<std::vector<size_t>> buckets_;
  // Each parameter's gradient as this DDP last left it: a gradient that is
  // another tensor now was written by a backward since.
  std::vector<const void*> seen_grads_;
  bool syncing_ = true;
  int64_t hook_ = -1;
};

}  // namespace tandem::distributed
