#include "kernels/communicator.h"

#include <future>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"

#include "core/error.h"

namespace tandem::kernels {
namespace {

struct Communicators {
  std::mutex mu;
  absl::flat_hash_map<int, std::shared_ptr<Communicator>> by_group;
};

Communicators& communicators() {
  static auto* all = new Communicators;  // Never destroyed: ops may run during exit.
  return *all;
}

}  // namespace

void install_communicator(int group, std::shared_ptr<Communicator> communicator) {
  TANDEM_CHECK(communicator != nullptr, "no communicator given for process group ", group);
  Communicators& all = communicators();
  std::lock_guard lock(all.mu);
  all.by_group[group] = std::move(communicator);
}

void remove_communicator(int group) {
  Communicators& all = communicators();
  std::lock_guard lock(all.mu);
  all.by_group.erase(group);
}

std::shared_ptr<Communicator> communicator(int group) {
  Communicators& all = communicators();
  std::lock_guard lock(all.mu);
  auto it = all.by_group.find(group);
  TANDEM_CHECK(it != all.by_group.end(), "process group ", group,
               " does not exist in this process (call tandem::distributed::init() first)");
  return it->second;
}

engine::Var* collective_order_var(Device device) {
  // Never deleted: as long as the process. The CPU's without a lock, since
  // every eager collective on the CPU asks for it.
  if (device.is_cpu()) {
    static engine::Var* cpu = engine::new_var();
    return cpu;
  }
  static std::mutex mu;
  static auto* by_cuda_device = new absl::flat_hash_map<int, engine::Var*>;
  std::lock_guard lock(mu);
  engine::Var*& var = (*by_cuda_device)[device.index()];
  if (var == nullptr) var = engine::new_var(device);
  return var;
}

void Communicator::launch(const CollectiveCall& call, int device, void* /*stream*/) {
  TANDEM_CHECK(false, collective_name(call.kind), " of tensors on cuda:", device,
               ": this process group has no GPU communicator (a build without CUDA or NCCL)");
}

void run_collective(Communicator& communicator, CollectiveCall call,
                    const engine::RunContext& run) {
  if (run.device.is_cuda()) {
    communicator.launch(call, run.device.index(), run.stream);
    return;
  }
  if (run.deferral != nullptr) {
    communicator.start(std::move(call), run.deferral->defer());
    return;
  }
  auto finished = std::make_shared<std::promise<std::exception_ptr>>();
  std::future<std::exception_ptr> result = finished->get_future();
  communicator.start(std::move(call), engine::Completion([finished](std::exception_ptr failure) {
                       finished->set_value(std::move(failure));
                     }));
  if (std::exception_ptr failure = result.get()) std::rethrow_exception(failure);
}

}  // namespace tandem::kernels
