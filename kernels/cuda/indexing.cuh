// What the CUDA kernels that index by int64 tensors share (take, embedding
// and index_add in shape.cu; gather, the scatters and one_hot in
// indexing.cu; the gradients of sort and topk): how an index is resolved,
// and atomic adds for every numeric dtype. Included by .cu files only.
//
// Note [Indices out of range on the GPU]: the CPU kernels throw for an index
// outside [-size, size) ([0, size) for embedding), but a GPU kernel cannot
// fail its op without the host waiting for it. Such an index selects
// nothing instead: the gathers (take, embedding, gather, gather_nd) write
// zeros for it, the scatters skip it, and one_hot writes a row of zeros.
#pragma once

#include <cstdint>

namespace tandem::kernels::cuda {

// A negative index counts from the end (Note [Negative indices] in
// kernels/ops/indexing.cc); the caller checks the result against [0, size).
__device__ __forceinline__ int64_t resolve_index(int64_t index, int64_t size) {
  return index < 0 ? index + size : index;
}

__device__ __forceinline__ bool in_range(int64_t index, int64_t size) {
  return index >= 0 && index < size;
}

// Native atomics where CUDA has them; uint8 by compare-and-swap of the
// aligned 32-bit word that holds it.
__device__ __forceinline__ void atomic_add(float* at, float v) { atomicAdd(at, v); }
__device__ __forceinline__ void atomic_add(double* at, double v) { atomicAdd(at, v); }
__device__ __forceinline__ void atomic_add(int32_t* at, int32_t v) { atomicAdd(at, v); }
__device__ __forceinline__ void atomic_add(int64_t* at, int64_t v) {
  // Two's complement: the unsigned sum has the bits of the wrapped signed one.
  atomicAdd(reinterpret_cast<unsigned long long*>(at), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void atomic_add(uint8_t* at, uint8_t v) {
  auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(at) & ~uintptr_t{3});
  unsigned int shift = (reinterpret_cast<uintptr_t>(at) & 3u) * 8u;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    unsigned int sum = ((assumed >> shift) + v) & 0xFFu;
    old = atomicCAS(word, assumed, (assumed & ~(0xFFu << shift)) | (sum << shift));
  } while (old != assumed);
}

}  // namespace tandem::kernels::cuda
