#include "core/storage.h"

#include "core/allocator.h"
#include "core/engine/engine.h"

namespace tandem {

Storage::Storage(size_t nbytes, Device device)
    : data_(allocator_for(device).allocate(nbytes)),
      nbytes_(nbytes),
      device_(device),
      var_(engine::new_var()) {}

Storage::~Storage() {
  // See Note [Freeing memory that ops still use].
  engine::current().delete_var(
      var_, [data = data_, nbytes = nbytes_, device = device_](const engine::RunContext&) {
        allocator_for(device).deallocate(data, nbytes);
      });
}

}  // namespace tandem
