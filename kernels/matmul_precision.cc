#include "kernels/matmul_precision.h"

#include <atomic>

namespace tandem {
namespace {

// Relaxed: the setting publishes no other data, so it needs no ordering.
std::atomic<MatmulPrecision> precision{MatmulPrecision::kFloat32};

}  // namespace

void set_cuda_matmul_precision(MatmulPrecision value) {
  precision.store(value, std::memory_order_relaxed);
}

MatmulPrecision cuda_matmul_precision() { return precision.load(std::memory_order_relaxed); }

}  // namespace tandem
