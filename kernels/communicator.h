// Communicators: how the collective ops (all_reduce, broadcast, all_gather,
// reduce_scatter; kernels/ops/collective.cc) reach the other processes.
//
// kernels/ knows only this interface. distributed/ implements it over MPI
// (CPU tensors) and NCCL (CUDA tensors) and installs one communicator per
// process group; a graph's collective nodes name their group by number, so
// a traced training step replays its all-reduces like any other node, and a
// graph loaded in another program talks to that program's group of the same
// number.
//
// Note [Collectives run in program order]
// MPI requires every process to start the collectives of a communicator in
// the same order. Each process pushes them in program order, which is the
// same on every rank of a data-parallel program; the engine keeps that
// order because every collective op also writes one var of its device,
// collective_order_var(device), so each starts only once the one pushed
// before it has finished (on a GPU, once it has been enqueued: the var lives
// on the device, so the stream orders it and the op still completes at
// launch). Without it the engine would start whichever is ready first, and
// a collective whose input is still being copied to the GPU could be
// overtaken on one rank and not on another. They still overlap with everything else: a
// collective finishes later (Note [Ops that finish later] in core/engine/engine.h), and the worker
// runs backward's kernels meanwhile.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tandem::kernels {

// How a reducing collective combines the ranks' elements. kMean is the sum
// divided by the group's size (floating dtypes only).
enum class Reduction { kSum, kMean, kMax, kMin };

// The names the ops' "reduction" attribute uses: "sum", "mean", "max", "min".
std::string_view reduction_name(Reduction reduction);
Reduction parse_reduction(std::string_view name);

enum class CollectiveKind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier };

// The op of a kind ("all_reduce", ...; "barrier", which is no op): a string
// literal, whose data() profiles may keep.
std::string_view collective_name(CollectiveKind kind);

// One collective, as a communicator receives it. `input` and `output` are
// allocated with the shapes the op inferred, and no other op touches them
// until the Completion is called.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  Tensor input;
  Tensor output;
  Reduction reduction = Reduction::kSum;
  int root = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Carries out `call` and then calls `done` (with the Error that stopped
  // it, if any), from any thread, possibly before returning.
  virtual void start(CollectiveCall call, engine::Completion done) = 0;
  // A collective of tensors on CUDA device `device`: enqueued on `stream`
  // (the op's cudaStream_t) behind the work already there, and returns
  // without waiting, as every GPU op does (Note [GPU ops complete at launch]
  // in core/engine/threaded_engine.cc). By default an Error: a communicator
  // without GPU support.
  virtual void launch(const CollectiveCall& call, int device, void* stream);
};

// The process groups of this process, by number; 0 is the whole world.
// Installed by distributed/ (distributed::init); a collective of a group
// that has none is an Error naming the group.
void install_communicator(int group, std::shared_ptr<Communicator> communicator);
void remove_communicator(int group);
std::shared_ptr<Communicator> communicator(int group);

// See Note [Collectives run in program order]; lives as long as the process.
engine::Var* collective_order_var(Device device = Device::cpu());

// Runs `call` on `communicator` inside an op's function: on a GPU, enqueued
// on the op's stream (Communicator::launch); on the CPU, finishing later
// where the engine lets the op (run.deferral), else waiting here.
void run_collective(Communicator& communicator, CollectiveCall call, const engine::RunContext& run);

}  // namespace tandem::kernels
