#!/usr/bin/env bash
# Fetches the Debian packages Tandem builds against into .gpu-deps/, for a machine that lacks them
# and has no network: a lent GPU machine (an Ubuntu-like image with the CUDA toolkit, CMake,
# ninja and gcc, but none of these libraries). tools/gpu_check.sh unpacks them there with
# dpkg-deb -x into /tmp/tandem-deps; nothing is installed.
#
#   bash tools/gpu_deps.sh     # here, where apt works; then carry .gpu-deps to the GPU machine
#
# The list: each -dev package Tandem's CMake finds, the runtime package its .so links point at,
# Open MPI's programs (mpirun, ompi-server; tools/gpu_check.sh runs them from the unpacked tree
# with OPAL_PREFIX), and oneDNN's OpenCL loader and headers (Debian builds oneDNN with its OpenCL GPU runtime, so
# its CMake config asks for OpenCL and libdnnl.so.2 loads libOpenCL.so.1). Left out, because
# the image has them: libc, libstdc++, libgcc-s, libgomp (gcc's own), and googletest's sources
# (libgtest-dev already holds the built libgtest.a and libgmock.a).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.gpu-deps"

PACKAGES=(
  libdnnl-dev libdnnl2
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
  libabsl-dev libabsl20220623
  nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian
  zlib1g-dev zlib1g
  # The ONNX importer (serialization/onnx_*): protobuf and ONNX.
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler
  libonnx-dev libonnx1 libonnxifi
  # Process groups (distributed/): Open MPI, its runtime and its transports' libraries (not
  # the -dev packages libopenmpi-dev names: its compiler wrappers link libmpi alone).
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
  libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0
  libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1
)

rm -rf "$DEST"
mkdir -p "$DEST"
# apt-get download writes into the working directory and needs no root.
(cd "$DEST" && apt-get -qq download "${PACKAGES[@]}")

echo "tools/gpu_deps.sh: ${#PACKAGES[@]} packages in .gpu-deps/:"
ls -l "$DEST"/*.deb | awk '{printf "  %8.1f KiB  %s\n", $5 / 1024, $NF}' | sed "s|$DEST/||"
total=$(du -cb "$DEST"/*.deb | tail -1 | cut -f1)
awk -v b="$total" 'BEGIN { printf "total: %.1f MiB (the carry limit is 64 MiB with the tree)\n", b / 1048576 }'
