#include "core/storage.h"

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/error.h"

namespace tandem {
namespace {

thread_local std::vector<std::shared_ptr<Storage>>* kept_storages = nullptr;

Allocator& allocator_of(Device device, bool pinned) {
  TANDEM_INTERNAL_ASSERT(!pinned || device.is_cpu(), "pinned memory on ", device.to_string());
  return pinned ? pinned_host_allocator() : allocator_for(device);
}

// The first storage starts the process-wide engine, before it allocates:
// starting it may throw (a setting it does not accept), and the destructor,
// which hands the memory to the engine, must not be where it starts. A
// frontend running ahead waits here before it takes more memory (Note
// [Bounded run-ahead] in core/engine/threaded_engine.cc).
void* allocate(size_t nbytes, Device device, bool pinned) {
  engine::current().wait_for_memory();
  return allocator_of(device, pinned).allocate(nbytes);
}

}  // namespace

Storage::Storage(size_t nbytes, Device device, bool pinned)
    : data_(allocate(nbytes, device, pinned)),
      nbytes_(nbytes),
      device_(device),
      pinned_(pinned),
      var_(engine::new_var(device, nbytes)) {}

Storage::~Storage() {
  // See Note [Freeing memory that ops still use].
  engine::current().delete_var(var_, [data = data_, nbytes = nbytes_, device = device_,
                                      pinned = pinned_](const engine::RunContext&) {
    allocator_of(device, pinned).deallocate(data, nbytes);
  });
}

KeepNewStorages::KeepNewStorages(std::vector<std::shared_ptr<Storage>>* kept)
    : previous_(kept_storages) {
  kept_storages = kept;
}

KeepNewStorages::~KeepNewStorages() { kept_storages = previous_; }

void KeepNewStorages::note(const std::shared_ptr<Storage>& storage) {
  if (kept_storages != nullptr) kept_storages->push_back(storage);
}

}  // namespace tandem
