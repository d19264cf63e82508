// What every CUDA kernel file needs: the op's stream, grid sizes, and a
// check after each launch. Included by .cu files only.
//
//   void relu_kernel(const KernelContext& c) {
//     int64_t n = c.outputs[0].numel();
//     if (n == 0) return;
//     relu<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::stream_of(c)>>>(...);
//     TANDEM_CUDA_CHECK_LAUNCH();
//   }
//
// Kernels only enqueue work on the stream and return; see Note [GPU ops
// complete at launch] in core/engine/threaded_engine.cc.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/cuda/check.h"
#include "kernels/registry.h"

namespace tandem::kernels::cuda {

inline constexpr int kThreadsPerBlock = 256;
// Grid-stride loops cover any size with at most this many blocks, plenty
// to fill every SM of an H200 (132 SMs x 16 blocks of 256 threads).
inline constexpr int64_t kMaxBlocks = 65535;

inline cudaStream_t stream_of(const KernelContext& context) {
  return static_cast<cudaStream_t>(context.run.stream);
}

// Blocks for a grid-stride loop over `n` elements.
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks));
}

}  // namespace tandem::kernels::cuda

// A launch with a bad configuration fails at once, without touching the
// stream; this turns that into a tandem::Error for the op.
#define TANDEM_CUDA_CHECK_LAUNCH() TANDEM_CUDA_CHECK(cudaGetLastError())
