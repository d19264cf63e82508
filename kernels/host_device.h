// TANDEM_HOST_DEVICE marks a function that both the CPU kernels and the CUDA
// kernels call, so that one definition serves both devices:
//
//   TANDEM_HOST_DEVICE inline uint64_t mix(uint64_t z) { ... }
//
// Under nvcc it is `__host__ __device__`; for the host compiler it is
// nothing. Headers that use it stay plain C++ (no CUDA include), so the CPU
// build never sees CUDA.
#pragma once

#ifdef __CUDACC__
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif
