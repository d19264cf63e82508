// Note [cuBLAS on demand] (kernels/cuda/cublas_on_demand.cc): the kernels
// reach cuBLAS through functions that open the library on first use. Its
// status names need no GPU, so they show here that the library opens and the
// calls reach the real functions.
#ifdef TANDEM_WITH_CUDA

#include "gtest/gtest.h"
#include <cublas_v2.h>

namespace {

TEST(CublasOnDemandTest, ForwardsToTheRealLibrary) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_NE(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)), "");
}

}  // namespace

#endif  // TANDEM_WITH_CUDA
