#!/usr/bin/env bash
# Tandem's one developer entry point: the same commands a developer types are what CI runs
# (.ci/run is `tools/tandem.sh test`), so "passes locally" and "passes in CI" mean the same.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

JOBS="${TANDEM_JOBS:-2}"

# CI builds a fresh clone in a new folder each time: make ccache key on paths relative to the
# checkout (and ignore the working directory that -g builds would hash), so those builds hit the
# cache that earlier runs on this machine filled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

# Everything the project builds against, now or soon (oneDNN and nlohmann-json are installed
# ahead of the modules that use them so that adding those modules needs no CI change).
# clang + libclang-rt give a second compiler with its own sanitizer runtimes.
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
  libdnnl-dev nlohmann-json3-dev
  clang-format clang libclang-rt-14-dev
  dataset-fashion-mnist
)

# Installed by `bench` only, never by `deps` or CI: libtorch is the benchmarks' side-by-side peer,
# not a dependency (bench/torch/ builds only where CMake finds it), and OpenBLAS's OpenMP build
# gives it a real BLAS that shares its OpenMP pool (Note [libtorch configurations] in
# bench/harness.h).
BENCH_PACKAGES=(libtorch-dev libopenblas0-openmp)

usage() {
  cat <<'EOF'
usage: tools/tandem.sh <command> [args]

  deps            install the Debian packages the project needs (only those missing)
  build [preset]  configure if needed and build; preset: release (default), asan, tsan
                    release -> build/release   optimized, everything
                    asan    -> build/asan      ASan+UBSan, Debug -O1, no benchmarks
                    tsan    -> build/tsan      TSan, Debug -O1, only engine_tests
  demo [args]     build release and train the Fashion-MNIST CNN (tutorials/02_train_fashion_mnist)
  test            the full CI suite: release+ctest, check-format, install+consumer,
                  asan+ctest, tsan+ctest (engine label); prints a timed summary
  bench [args]    install the libtorch peer's packages, build release and run every
                  build/release/bench/bench_* with args (figures: bench/README.md)
  format          rewrite all sources with clang-format
  help            this text

environment: TANDEM_JOBS (build parallelism, default 2), TANDEM_CUDA (AUTO|ON|OFF, default AUTO)
EOF
}

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Root in CI containers, a normal user with sudo on workstations.
as_root() {
  if [[ $EUID -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "tandem.sh: need root (or sudo) to run: $*" >&2
    return 1
  fi
}

cmd_deps() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    # `dpkg -s` alone succeeds for removed-but-not-purged packages; check the status line.
    dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing missing packages: ${missing[*]}"
  as_root apt-get update
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

# preset_dir PRESET: the build tree of a preset.
preset_dir() { echo "build/$1"; }

# configure PRESET: create the build tree unless it exists. An existing tree reconfigures itself
# (ninja re-runs cmake when a CMakeLists.txt changes), so its cache settings are left alone.
configure() {
  local preset="$1" dir
  dir="$(preset_dir "$preset")"
  [[ -f "$dir/build.ninja" ]] && return 0
  local args=(-G Ninja -S . -B "$dir" "-DTANDEM_CUDA=${TANDEM_CUDA:-AUTO}")
  case "$preset" in
    release)
      args+=(-DCMAKE_BUILD_TYPE=Release) ;;
    asan)
      # -O1 keeps sanitized tests fast while leaving stack traces readable.
      args+=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1"
             -DTANDEM_SANITIZE=address -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_TUTORIALS=ON) ;;
    tsan)
      args+=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1"
             -DTANDEM_SANITIZE=thread -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_TUTORIALS=OFF) ;;
    *)
      echo "tandem.sh: unknown preset '$preset' (release, asan, tsan)" >&2
      return 2 ;;
  esac
  log "configuring $preset in $dir"
  cmake "${args[@]}"
}

# TSan maps its shadow memory at fixed addresses; with high ASLR entropy (vm.mmap_rnd_bits) gcc's
# runtime aborts with "unexpected memory mapping". Disabling ASLR for the process tree avoids it;
# where the personality syscall is not allowed (some containers), run without it.
tsan_wrap() {
  if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true 2>/dev/null; then
    setarch "$(uname -m)" -R "$@"
  else
    "$@"
  fi
}

cmd_build() {
  local preset="${1:-release}" dir
  cmd_deps
  configure "$preset"
  dir="$(preset_dir "$preset")"
  log "building $preset (-j$JOBS)"
  if [[ "$preset" == tsan ]]; then
    # Only the engine is threaded enough to be worth TSan's cost. The build runs under tsan_wrap
    # because gtest_discover_tests executes the instrumented binary at build time.
    tsan_wrap cmake --build "$dir" -j "$JOBS" --target engine_tests
  else
    cmake --build "$dir" -j "$JOBS"
  fi
}

cmd_demo() {
  cmd_build release
  exec build/release/tutorials/02_train_fashion_mnist "$@"
}

cmd_bench() {
  PACKAGES+=("${BENCH_PACKAGES[@]}")  # cmd_deps, here and in cmd_build, installs them too.
  cmd_deps
  configure release
  # A tree configured before libtorch-dev was installed cached "not found"; look again.
  if grep -q '^Torch_DIR:PATH=.*NOTFOUND' build/release/CMakeCache.txt; then
    cmake build/release
  fi
  cmd_build release
  local b found=0
  for b in build/release/bench/bench_*; do
    [[ -f "$b" && -x "$b" ]] || continue
    found=1
    log "$b"
    "$b" "$@"
  done
  ((found)) || echo "no benchmarks in build/release/bench/"
}

cmd_format() {
  cmd_deps
  configure release
  cmake --build build/release --target format
}

# ---------------------------------------------------------------------------------------------
# test: each step runs in a subshell with errexit, so one failing step is reported and the rest
# still run (a CI log then shows every problem at once); the exit status is non-zero if any failed.
# ---------------------------------------------------------------------------------------------
step_release() {
  cmd_build release
  ctest --test-dir build/release --output-on-failure -j "$JOBS"
}

step_format() {
  configure release
  cmake --build build/release --target check-format
}

# Installs into a fresh prefix and builds an outside project against it: catches headers missing
# from the install, wrong exported include paths and missing find_dependency() calls.
step_consumer() {
  rm -rf build/install build/consumer
  cmake --install build/release --prefix build/install
  cmake -G Ninja -S cmake/consumer -B build/consumer \
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$ROOT/build/install"
  cmake --build build/consumer
  build/consumer/tandem_consumer
}

step_asan() {
  # protect_shadow_gap=0: the CUDA driver maps memory inside ASan's shadow gap on GPU machines.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:protect_shadow_gap=0:allocator_may_return_null=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  cmd_build asan
  ctest --test-dir build/asan --output-on-failure -j "$JOBS"
}

step_tsan() {
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  cmd_build tsan
  tsan_wrap ctest --test-dir build/tsan -L engine --output-on-failure
}

cmd_test() {
  local steps=(release format consumer asan tsan)
  local -a names=() results=() times=()
  local s start rc failed=0 total_start=$SECONDS
  cmd_deps
  for s in "${steps[@]}"; do
    printf '\n\033[1;34m======== [%s] %s ========\033[0m\n' "$(date +%H:%M:%S)" "$s"
    start=$SECONDS
    set +e
    (set -e; "step_$s")
    rc=$?
    set -e
    names+=("$s"); times+=($((SECONDS - start)))
    if ((rc == 0)); then
      results+=(PASS)
    else
      results+=("FAIL (exit $rc)"); failed=1
    fi
    printf '\033[1;34m======== %s: %s in %ds ========\033[0m\n' "$s" "${results[-1]}" "${times[-1]}"
  done
  printf '\n\033[1mSummary\033[0m\n'
  local i
  for i in "${!names[@]}"; do
    printf '  %-10s %-16s %5ds\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
  done
  printf '  %-10s %-16s %5ds\n' total "$( ((failed)) && echo FAIL || echo PASS)" \
    $((SECONDS - total_start))
  return "$failed"
}

main() {
  local cmd="${1:-help}"
  (($# > 0)) && shift
  case "$cmd" in
    deps) cmd_deps ;;
    build) cmd_build "$@" ;;
    demo) cmd_demo "$@" ;;
    test) cmd_test ;;
    bench) cmd_bench "$@" ;;
    format) cmd_format ;;
    help | -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
