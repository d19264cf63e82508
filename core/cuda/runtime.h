// The few CUDA runtime services core/ needs, behind a header that includes
// no CUDA header: streams, events and memory of the CUDA devices. Builds
// without CUDA link runtime_none.cc, whose functions report that this build
// has no CUDA (they are unreachable there: such a build sees no devices).
//
// Handles are opaque pointers: a stream is a cudaStream_t, an event a
// cudaEvent_t. Kernels cast them back (kernels/cuda/launch.h).
#pragma once

#include <cstddef>

namespace tandem::cuda {

// Makes `device` current on the calling thread (cudaSetDevice).
void set_device(int device);

// The device's stream: every op on the device is enqueued on it, in the
// order the engine runs the ops (Note [GPU ops complete at launch] in
// core/engine/threaded_engine.cc). Created on first use, never destroyed.
void* stream(int device);

// Blocks until everything enqueued on `stream` so far has run; throws
// tandem::Error with the error of a kernel that failed asynchronously.
void synchronize(void* stream);

// Records an event on `stream` (from a pool: no allocation in steady state).
void* record_event(void* stream);
// Blocks until `event` has fired, then returns it to the pool. Throws like
// synchronize().
void wait_and_release_event(void* event);

// Enqueues a copy of `nbytes` on `stream`; host, device and peer memory
// alike (unified addressing tells them apart).
void copy_async(void* dst, const void* src, size_t nbytes, void* stream);

// CUDA graphs: what the calling thread enqueues on `stream` between
// begin_capture and end_capture is recorded, not run. end_capture returns
// the graph ready to launch, or null when something in it could not be
// captured (the stream is then usable again and no error lingers).
void begin_capture(void* stream);
void* end_capture(void* stream);
// Enqueues one run of a captured graph on `stream`.
void launch_graph(void* graph, void* stream);

// Device memory of `device`: null when the device has none left.
void* device_malloc(int device, size_t nbytes);
// Frees device memory; implicitly waits for the device to finish its work.
void device_free(int device, void* block);
// Page-locked host memory, which copies to and from a device can use
// without a staging copy; null when the system refuses.
void* pinned_malloc(size_t nbytes);
void pinned_free(void* block);

}  // namespace tandem::cuda
