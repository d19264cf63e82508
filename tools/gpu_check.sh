#!/usr/bin/env bash
# The GPU check of issue 6: on a fresh machine with a GPU, builds Tandem with CUDA, runs the GPU
# tests and bench_cuda, and ends with a short table. Within 8 minutes on one H200 with 16 cores.
#
#   bash tools/gpu_check.sh [--build-dir DIR] [--configure-only] [--system-deps]
#
# Run from anywhere; it works in the repository root. Build libraries the image lacks (oneDNN,
# Abseil, nlohmann-json, GoogleTest, Google Benchmark, zlib headers) come from .gpu-deps/, the
# .deb files tools/gpu_deps.sh fetched on a machine with apt: they are unpacked with dpkg-deb -x
# into /tmp/tandem-deps (nothing is installed) and CMake, the compiler, the linker and the
# programs are pointed at them. Without .gpu-deps/ (or with --system-deps) the system's packages
# are used, as on the development VM, where the GPU tests skip and bench_cuda prints its skip
# line. --configure-only stops after CMake (to check the unpacking and the paths).
#
# Environment: TANDEM_JOBS (default: nproc), TANDEM_CUDA_ARCHITECTURES (default: 90-real, the
# H200's). Logs go to <build dir>/gpu-check/, and to $OUT when that is set.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

BUILD="build/gpu"
CONFIGURE_ONLY=0
USE_DEPS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD="$2"; shift 2 ;;
    --configure-only) CONFIGURE_ONLY=1; shift ;;
    --system-deps) USE_DEPS=0; shift ;;
    *) echo "usage: tools/gpu_check.sh [--build-dir DIR] [--configure-only] [--system-deps]" >&2
       exit 2 ;;
  esac
done
JOBS="${TANDEM_JOBS:-$(nproc)}"
DEPS=/tmp/tandem-deps
LOGS="$BUILD/gpu-check"
mkdir -p "$LOGS"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"

# The device tool of these sessions brings back what a command leaves under $OUT: the logs,
# however the check ends.
save_logs() {
  if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
    cp "$LOGS"/*.log "$OUT"/ 2> /dev/null && echo "(logs copied to \$OUT)"
  fi
}
trap save_logs EXIT

START=$SECONDS
STEP_START=$SECONDS
SUMMARY=()  # Lines of the final table.
step() {
  echo
  echo "== $1 (at $((SECONDS - START)) s)"
  STEP_START=$SECONDS
}
step_done() { echo "   ($1: $((SECONDS - STEP_START)) s)"; SUMMARY+=("$(printf '%-34s %5s s' "$1" $((SECONDS - STEP_START)))"); }

# ---- 1. Dependencies ---------------------------------------------------------------------------
step "dependencies"
if [[ $USE_DEPS == 1 ]] && compgen -G ".gpu-deps/*.deb" > /dev/null; then
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  for deb in .gpu-deps/*.deb; do
    if command -v dpkg-deb > /dev/null; then
      dpkg-deb -x "$deb" "$DEPS" || { echo "cannot unpack $deb" >&2; exit 1; }
    else  # No dpkg: a .deb is an ar archive holding data.tar.*.
      scratch=$(mktemp -d)
      (cd "$scratch" && ar x "$ROOT/$deb" && tar -xf data.tar.* -C "$DEPS") ||
        { echo "cannot unpack $deb" >&2; exit 1; }
      rm -rf "$scratch"
    fi
  done
  # Absolute links (zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) would reach
  # into the image's own files, which may be another version: point them into $DEPS.
  find "$DEPS" -type l -lname '/*' | while read -r link; do
    target=$(readlink "$link")
    [[ -e $DEPS$target ]] && ln -sfn "$DEPS$target" "$link"
  done
  PREFIX="$DEPS/usr"
  LIBDIR="$PREFIX/lib/x86_64-linux-gnu"
  # Open MPI finds its plugins, wrapper data and helpers relative to OPAL_PREFIX; the names
  # Debian's alternatives would have made (mpirun, mpicxx, ...) point at its programs.
  export OPAL_PREFIX="$PREFIX"
  for program in mpirun mpiexec mpicc mpicxx; do
    [[ -e $PREFIX/bin/$program.openmpi ]] && ln -sfn "$program.openmpi" "$PREFIX/bin/$program"
  done
  export PATH="$PREFIX/bin:$PATH"
  export CMAKE_PREFIX_PATH="$PREFIX${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$PREFIX/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "   unpacked $(ls .gpu-deps/*.deb | wc -l) packages into $DEPS ($(du -sh "$DEPS" | cut -f1))"
  # usr/src/gtest: sources, unused; usr/share/doc: documentation.
  dangling=$(find "$DEPS" -xtype l -not -path "*/usr/src/*" -not -path "*/usr/share/doc/*")
  [[ -n $dangling ]] && echo "   WARNING: links to files no package brought: $dangling"
  # Debian 12's libraries want gcc 12's libstdc++ (GLIBCXX_3.4.30) and glibc >= 2.34.
  libstdcxx=$(g++ -print-file-name=libstdc++.so.6)
  if [[ -f $libstdcxx ]] && ! grep -qa GLIBCXX_3.4.30 "$(readlink -f "$libstdcxx")"; then
    echo "   WARNING: $libstdcxx lacks GLIBCXX_3.4.30, which Debian 12's libraries need"
  fi
  echo "   glibc $(ldd --version | head -1 | awk '{print $NF}') (Debian's libraries need >= 2.34)"
  SUMMARY_DEPS=".gpu-deps, unpacked in $DEPS"
else
  echo "   no .gpu-deps/ (or --system-deps): using the system's packages"
  SUMMARY_DEPS="system packages"
fi
step_done "dependencies"

# ---- 2. The machine ----------------------------------------------------------------------------
step "machine"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "   no nvidia-smi"
fi
echo "   $(nproc) cores; $(cmake --version | head -1); $(g++ --version | head -1)"
NVCC=$( (command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2> /dev/null | head -1)
echo "   nvcc: ${NVCC:-none}"
# cuDNN: kernels/ looks beside the toolkit's libraries (and in the system's). Where the toolkit
# came without it, PyTorch's pip install may carry one (nvidia.cudnn): point the build at that.
CUDNN_ARGS=()
CUDA_DIR=$(dirname "$(dirname "$(readlink -f "${NVCC:-/usr/local/cuda/bin/nvcc}")")")
if compgen -G "$CUDA_DIR/lib*/libcudnn.so" > /dev/null ||
   compgen -G "/usr/lib/x86_64-linux-gnu/libcudnn.so" > /dev/null; then
  echo "   cuDNN: with the toolkit or the system"
else
  pip_cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2> /dev/null)
  if [[ -n $pip_cudnn ]] && compgen -G "$pip_cudnn/lib/libcudnn.so.*" > /dev/null; then
    mkdir -p /tmp/tandem-cudnn
    ln -sfn "$(ls "$pip_cudnn"/lib/libcudnn.so.* | head -1)" /tmp/tandem-cudnn/libcudnn.so
    export CPATH="$pip_cudnn/include${CPATH:+:$CPATH}"
    export LD_LIBRARY_PATH="$pip_cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    CUDNN_ARGS=(-DTANDEM_CUDNN_LIBRARY=/tmp/tandem-cudnn/libcudnn.so)
    echo "   cuDNN: not with the toolkit; using PyTorch's, $pip_cudnn"
  else
    echo "   cuDNN: NOT FOUND (neither with the toolkit nor in a PyTorch install); configure will fail"
  fi
fi

# NCCL (distributed/nccl_collectives.h): its header beside the toolkit's, or PyTorch's pip copy
# (nvidia.nccl), whose library the GPU collectives then open.
NCCL_ARGS=()
if [[ -f $CUDA_DIR/include/nccl.h ]]; then
  echo "   NCCL: with the toolkit"
else
  pip_nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2> /dev/null)
  if [[ -n $pip_nccl && -f $pip_nccl/include/nccl.h ]]; then
    NCCL_ARGS=("-DTANDEM_NCCL_INCLUDE_DIR=$pip_nccl/include")
    export LD_LIBRARY_PATH="$pip_nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "   NCCL: not with the toolkit; using PyTorch's, $pip_nccl"
  else
    echo "   NCCL: NOT FOUND; the GPU collectives are not built and their tests fail"
  fi
fi

# ---- 3. Configure ------------------------------------------------------------------------------
step "configure"
GENERATOR=()
command -v ninja > /dev/null && GENERATOR=(-G Ninja)
# sm_90 code only: the H200 runs it, and the project's PTX for older GPUs doubles nvcc's time.
ARCHS="${TANDEM_CUDA_ARCHITECTURES:-90-real}"
# PRE_TEST: the test lists are read when ctest runs, not by running each test program at build
# time. libtorch (bench/torch's peer) is not looked for: a PyTorch install may hold one.
if ! cmake "${GENERATOR[@]}" -S . -B "$BUILD" -DTANDEM_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DTANDEM_BUILD_TUTORIALS=OFF -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
    -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" "${CUDNN_ARGS[@]}" "${NCCL_ARGS[@]}" > "$LOGS/configure.log" 2>&1; then
  tail -30 "$LOGS/configure.log"
  echo "gpu_check: configure FAILED (log: $LOGS/configure.log)"
  exit 1
fi
grep "Tandem:" "$LOGS/configure.log" | sed 's/^/   /'
echo "   found:"
grep -E "^(absl|dnnl|GTest|benchmark|nlohmann_json|ONNX)_DIR:|^ZLIB_LIBRARY_RELEASE:|^ZLIB_INCLUDE_DIR:|^OpenCL_LIBRARY:|^Protobuf_LIBRARY_RELEASE:|^MPIEXEC_EXECUTABLE:|^MPI_mpi_LIBRARY:" \
  "$BUILD/CMakeCache.txt" | sed 's/^/     /'
step_done "configure"
if [[ $CONFIGURE_ONLY == 1 ]]; then
  echo
  echo "gpu_check: configured $BUILD with dependencies from $SUMMARY_DEPS ($((SECONDS - START)) s)"
  exit 0
fi

# ---- 4. Build ----------------------------------------------------------------------------------
# The suites that hold GPU tests (grep -rn cuda tests/) and the benchmark.
SUITES=(kernels_tests eager_tests trace_tests distributed_tests)
step "build (${SUITES[*]} bench_cuda, -j$JOBS)"
if ! cmake --build "$BUILD" -j "$JOBS" --target "${SUITES[@]}" bench_cuda > "$LOGS/build.log" 2>&1; then
  grep -E "error|FAILED" "$LOGS/build.log" | head -30
  echo "gpu_check: build FAILED (log: $LOGS/build.log)"
  exit 1
fi
step_done "build"

# ---- 5. GPU tests ------------------------------------------------------------------------------
# The GPU tests by name: the op table's "_cuda" rows, CudaTraining, ExecutorTest...OnCuda, the
# cuBLAS loader; plus the device tests of eager/device_test.cc that run on the CPU too.
declare -A FILTER=(
  [kernels_tests]='*_cuda*:*Cuda*:*CUDA*:*Cublas*'
  [eager_tests]='*_cuda*:*Cuda*:*CUDA*:ModuleTo*:OptimizerDevice*:DataLoaderPinMemory*'
  [trace_tests]='*_cuda*:*Cuda*:*CUDA*'
  [distributed_tests]='Gpu*'
)
# distributed_tests is one process per rank: one rank per GPU, under mpirun
# (distributed/nccl_collectives.h).
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2> /dev/null | wc -l)
(( GPUS > 0 )) || GPUS=1
declare -A LAUNCH=([distributed_tests]="mpirun --allow-run-as-root --oversubscribe -np $GPUS")
TEST_ROWS=()
TESTS_FAILED=0
# "[  PASSED  ] 12 tests." -> 12; 0 when the line is missing.
count() { grep -E "^\[  $1 *\] [0-9]+ test" "$2" | head -1 | sed -E 's/[^]]*\] ([0-9]+).*/\1/'; }
for suite in "${SUITES[@]}"; do
  step "$suite --gtest_filter='${FILTER[$suite]}'"
  log="$LOGS/$suite.log"
  # shellcheck disable=SC2086  # The launcher is words.
  timeout 150 ${LAUNCH[$suite]:-} "$BUILD/tests/$suite" --gtest_filter="${FILTER[$suite]}" > "$log" 2>&1
  rc=$?
  passed=$(count PASSED "$log"); skipped=$(count SKIPPED "$log"); failed=$(count FAILED "$log")
  ran=$(grep -E '^\[==========\] [0-9]+ tests? from' "$log" | tail -1 | awk '{print $2}')
  note="ok"
  if [[ $rc != 0 ]]; then
    TESTS_FAILED=1
    note="exit $rc"
    [[ $rc == 124 ]] && note="TIMED OUT"
    grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | head -20 | sed 's/^/   /'
    [[ -z $ran ]] && tail -15 "$log" | sed 's/^/   | /'  # Crashed before the summary.
  fi
  echo "   ran ${ran:-?}: passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed:-0} ($note)"
  if [[ -n $skipped && $skipped != 0 ]]; then
    # gtest prints "file:line: Skipped" and the reason on the next line.
    grep -A1 -E ': Skipped$' "$log" | grep -vE ': Skipped$|^--$' | sort | uniq -c | sort -rn |
      head -3 | sed 's/^ */   skipped because: /'
  fi
  TEST_ROWS+=("$(printf '%-14s %6s %7s %8s %7s  %s' "$suite" "${ran:-?}" "${passed:-0}" \
    "${skipped:-0}" "${failed:-0}" "$note")")
  step_done "$suite"
done

# ---- 6. bench_cuda -----------------------------------------------------------------------------
step "bench_cuda"
timeout 180 "$BUILD/bench/bench_cuda" 2>&1 | tee "$LOGS/bench_cuda.log"
BENCH_RC=${PIPESTATUS[0]}
step_done "bench_cuda"

# ---- 7. Table ----------------------------------------------------------------------------------
echo
echo "================ gpu_check: $(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - START)) s in all"
echo "GPU: $( (nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null || echo none) | head -1)"
echo "dependencies: $SUMMARY_DEPS"
echo
printf '%-14s %6s %7s %8s %7s  %s\n' suite ran passed skipped failed status
for row in "${TEST_ROWS[@]}"; do echo "$row"; done
echo
echo "bench_cuda (exit $BENCH_RC):"
# The bench's own tables, without its per-section timing lines.
grep -vE '^  \[\(' "$LOGS/bench_cuda.log" | sed 's/^/  /'
echo
echo "time per step:"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
[[ $TESTS_FAILED == 0 && $BENCH_RC == 0 ]]
