// The distributed tests run as one program per rank (ctest starts them with
// mpirun -np 2 and -np 3, and once alone, a world of one): every rank runs
// every test, and a test's collectives pair up across ranks because every
// rank runs the same tests in the same order.
#include "gtest/gtest.h"

#include "distributed/distributed.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Generous: three ranks share two cores, and a sanitizer build is slow.
  tandem::distributed::init({.timeout = std::chrono::seconds(120)});
  const int result = RUN_ALL_TESTS();
  tandem::distributed::finalize();
  return result;
}
