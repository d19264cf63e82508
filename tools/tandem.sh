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
# clang-16 + libclang-rt-16-dev + libomp-16-dev build the fuzz targets (libFuzzer, clang's
# sanitizer runtimes, clang's omp.h); clang 16 because Debian's clang 14 lacks
# __builtin_source_location, which std::source_location needs. ocl-icd-opencl-dev is only a
# Recommends of libdnnl-dev, but Debian's dnnl-config.cmake requires OpenCL (its GPU runtime is
# OCL), so find_package(dnnl) fails without it on a machine that installs no recommends.
# dataset-fashion-mnist and fortunes are the tutorials' data: the images tutorial 02 trains on,
# the text (/usr/share/games/fortunes) tutorial 05's language model reads.
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
  libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libonnx-dev libprotobuf-dev libonnx-testdata
  libopenmpi-dev openmpi-bin
  clang-format clang-16 libclang-rt-16-dev libomp-16-dev
  dataset-fashion-mnist fortunes
)

# Installed by `bench` only, never by `deps` or CI: libtorch is the benchmarks' side-by-side peer,
# not a dependency (bench/torch/ builds only where CMake finds it), and OpenBLAS's OpenMP build
# gives it a real BLAS that shares its OpenMP pool (Note [libtorch configurations] in
# bench/harness.h); python3-torch traces the TorchScript model bench_deploy loads, and with
# python3-torchvision exports the real models of bench_onnx (bench/onnx/export_models.py).
BENCH_PACKAGES=(libtorch-dev libopenblas0-openmp python3-torch python3-torchvision python3-venv)

# The benchmarks' PyPI peers, installed by `bench` only into the virtual environment build/peers:
# the current PyTorch (whose wheel also carries libtorch for C++; bench/torch/torch_peer is built
# against it a second time, into build/release/bench/torch_pip), onnxruntime and onnx for the
# loaded-model rows (bench/torch/peer.py). Pinned, so that a figure can be measured again.
PEER_PIP_PACKAGES=(torch==2.15.0 onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6)

usage() {
  cat <<'EOF'
usage: tools/tandem.sh <command> [args]

  deps            install the Debian packages the project needs (only those missing)
  build [preset]  configure if needed and build; preset: release (default), asan, tsan, fuzz
                    release -> build/release   optimized, everything
                    asan    -> build/asan      ASan+UBSan, Debug -O1, no benchmarks
                    tsan    -> build/tsan      TSan, Debug -O1, only engine_tests and
                                               concurrency_tests
                    fuzz    -> build/fuzz      clang-16 libFuzzer+ASan+UBSan, Debug -O1,
                                               only the loaders' fuzz targets (tests/fuzz)
  demo [args]     build release and train the Fashion-MNIST CNN (tutorials/02_train_fashion_mnist)
  test            the full CI suite: release+ctest, check-format, install+consumer,
                  asan+ctest, fuzz (each loader target for TANDEM_FUZZ_SECONDS),
                  tsan+ctest (engine and concurrency labels); prints a timed summary
  fuzz [target] [seconds]
                  build the fuzz preset and fuzz one loader (graph_json, params, npy, model, onnx;
                  default all) for SECONDS each (default TANDEM_FUZZ_SECONDS or 45); the
                  corpus grows in build/fuzz/corpus/<target>, findings land in
                  build/fuzz/findings/<target> (tests/fuzz/README.md)
  difftest [N] [first seed]
                  build release and check N random models (default 10000) in every
                  mode against eager (tests/difftest/README.md); failures print the
                  model, shrunk, as code
  bench [args]    install the peers (Debian's libtorch; PyTorch, onnxruntime from PyPI into
                  build/peers), build release and run every build/release/bench/bench_* with
                  args (figures: bench/README.md)
  format          rewrite all sources with clang-format
  help            this text

environment: TANDEM_JOBS (build parallelism, default 2), TANDEM_CUDA (AUTO|ON|OFF, default AUTO),
             TANDEM_FUZZ_SECONDS (time per fuzz target in `test` and `fuzz`, default 45)
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
      # -O1 keeps sanitized tests fast while leaving stack traces readable. CUDA off in the
      # sanitizer builds: nvcc's objects carry no instrumentation, and without a GPU the CUDA
      # paths do not run; the release build compiles and links them.
      args+=(-DTANDEM_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1"
             -DTANDEM_SANITIZE=address -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_TUTORIALS=ON) ;;
    tsan)
      args+=(-DTANDEM_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1"
             -DTANDEM_SANITIZE=thread -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_TUTORIALS=OFF) ;;
    fuzz)
      # libFuzzer is clang's. The project enables only CXX; CC is set too so that a later C
      # language or a C check never mixes gcc objects into the instrumented build. CUDA off: the
      # loaders never touch a device.
      # OpenMP pragmas are compiled out (the OpenMP_CXX_* values stand in for -fopenmp): clang 16
      # refuses some C++20 in OpenMP mode that gcc accepts (a lambda capturing a structured
      # binding), the loaders run no parallel loop, and one thread makes findings reproducible.
      # parallel_for's omp_* calls (clang's omp.h, from libomp-16-dev) then link gcc's libgomp,
      # the runtime Debian's oneDNN loads anyway.
      args+=(--no-warn-unused-cli -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16
             -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DTANDEM_SANITIZE=fuzzer
             -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_TUTORIALS=OFF
             -DTANDEM_CUDA=OFF -DOpenMP_CXX_FLAGS=-Wno-source-uses-openmp
             -DOpenMP_CXX_LIB_NAMES=gomp "-DOpenMP_gomp_LIBRARY=$(g++ -print-file-name=libgomp.so)")
      ;;
    *)
      echo "tandem.sh: unknown preset '$preset' (release, asan, tsan, fuzz)" >&2
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
    # The engine, and the user API's concurrency contracts (tests/concurrency), are what is
    # threaded enough to be worth TSan's cost. The build runs under tsan_wrap because
    # gtest_discover_tests executes the instrumented binary at build time.
    tsan_wrap cmake --build "$dir" -j "$JOBS" --target engine_tests concurrency_tests
  elif [[ "$preset" == fuzz ]]; then
    # The fuzz targets and what they link (core, kernels, trace, serialization), nothing else.
    cmake --build "$dir" -j "$JOBS" --target fuzz_targets
  else
    cmake --build "$dir" -j "$JOBS"
  fi
}

cmd_demo() {
  cmd_build release
  exec build/release/tutorials/02_train_fashion_mnist "$@"
}

cmd_difftest() {
  local models="${1:-10000}" seed="${2:-1000000}"
  cmd_build release
  build/release/tests/difftest --models "$models" --seed "$seed"
}

# The PyPI peers (PEER_PIP_PACKAGES) in build/peers, and the libtorch peer built against the
# wheel's libtorch. Its libraries are found through CMAKE_PREFIX_PATH, which CMake searches before
# the system's folders, where Debian's libtorch also lives.
peers_setup() {
  local venv=build/peers torch_dir
  if [[ ! -x "$venv/bin/python" ]]; then
    log "creating $venv: ${PEER_PIP_PACKAGES[*]} (the benchmarks' peers)"
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${PEER_PIP_PACKAGES[@]}"
  torch_dir="$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  [[ -f build/release/bench/torch_pip/build.ninja ]] ||
    cmake -G Ninja -S bench/torch -B build/release/bench/torch_pip -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_PREFIX_PATH=$torch_dir"
  cmake --build build/release/bench/torch_pip -j "$JOBS"
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
  peers_setup
  local b found=0
  for b in build/release/bench/bench_*; do
    [[ -f "$b" && -x "$b" ]] || continue
    found=1
    log "$b"
    "$b" "$@"
  done
  ((found)) || echo "no benchmarks in build/release/bench/"
}

# ---------------------------------------------------------------------------------------------
# fuzz: the loaders' libFuzzer targets (tests/fuzz/README.md)
# ---------------------------------------------------------------------------------------------
FUZZ_TARGETS=(graph_json params npy model onnx)

# fuzz_seed_ext TARGET: the extension of the golden files (tests/data/golden) that seed it.
fuzz_seed_ext() {
  case "$1" in
    graph_json | model) echo json ;;
    params) echo params ;;
    npy) echo npy ;;
    onnx) echo onnx ;;
  esac
}

# fuzz_model_seed JSON OUT: a seed for the model target (tests/fuzz/model_fuzz.cc) from a graph
# file and the params file beside it: the graph file's length as 4 bytes little-endian, the graph
# file, the params file.
fuzz_model_seed() {
  local json="$1" out="$2" n escaped
  n=$(stat -c %s "$json")
  printf -v escaped '\\x%02x\\x%02x\\x%02x\\x%02x' $((n & 255)) $((n >> 8 & 255)) \
    $((n >> 16 & 255)) $((n >> 24 & 255))
  printf "$escaped" >"$out"
  cat "$json" "${json%.json}.params" >>"$out"
}

# The default time per target: CI fuzzes every target for this long.
FUZZ_SECONDS_DEFAULT=45

# fuzz_run TARGET SECONDS WORKDIR: fuzzes TARGET for SECONDS, starting from the corpus in WORKDIR
# (where new inputs are written), tests/fuzz/corpus/TARGET and the matching golden files (read
# only). Fails on any finding (crash, sanitizer report, leak, timeout, OOM) and keeps the input in
# build/fuzz/findings/TARGET.
fuzz_run() {
  local target="$1" seconds="$2" work="$3"
  local bin findings golden ext rc f
  bin="$(preset_dir fuzz)/tests/fuzz/fuzz_$target"
  findings="$ROOT/$(preset_dir fuzz)/findings/$target"
  golden="$(mktemp -d "${TMPDIR:-/tmp}/tandem-fuzz-golden.XXXXXX")"
  ext="$(fuzz_seed_ext "$target")"
  # libFuzzer takes folders, and the golden folder mixes kinds: copy the ones for this target
  # (for the model target, each graph file joined with its params file).
  # The onnx target starts from ONNX's own backend test models (libonnx-testdata, a dependency).
  if [[ "$target" == onnx ]]; then
    for f in /usr/share/libonnx-testdata/data/*/*/model.onnx; do
      [[ -f "$f" ]] && cp "$f" "$golden/$(basename "$(dirname "$f")").onnx"
    done
  fi
  for f in tests/data/golden/*."$ext"; do
    [[ -f "$f" ]] || continue
    if [[ "$target" == model ]]; then
      fuzz_model_seed "$f" "$golden/$(basename "$f" .json).model"
    else
      cp "$f" "$golden/"
    fi
  done
  mkdir -p "$work" "$findings"
  # -print_funcs=0: no line per newly covered function (hundreds, in a CI log).
  local args=(-max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10
              -max_len=65536 -print_final_stats=1 -print_funcs=0 -artifact_prefix="$findings/")
  # The model target's inputs are mostly graph JSON: it takes that target's dictionary.
  local dict="tests/fuzz/${target/#model/graph_json}.dict"
  [[ -f "$dict" ]] && args+=(-dict="$dict")
  log "fuzzing $target for ${seconds}s (seeds: tests/fuzz/corpus/$target," \
      "$(find "$golden" -type f | wc -l) golden files)"
  # clang's sanitizer runtimes symbolize stacks with an outside program: llvm-symbolizer where
  # one is installed (package llvm-16), else binutils' addr2line, which they can drive too.
  local symbolizer
  symbolizer="$(command -v llvm-symbolizer-16 || command -v addr2line || true)"
  set +e
  # The outer timeout only catches a fuzzer that stops honouring -max_total_time.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ASAN_SYMBOLIZER_PATH="$symbolizer" UBSAN_SYMBOLIZER_PATH="$symbolizer" \
    timeout --signal=KILL $((seconds + 120)) \
    "$bin" "${args[@]}" "$work" "tests/fuzz/corpus/$target" "$golden"
  rc=$?
  set -e
  rm -rf "$golden"
  if ((rc != 0)); then
    echo "fuzz_$target: FAILED (exit $rc); the input that failed is in $findings:" >&2
    for f in "$findings"/*; do
      [[ -f "$f" ]] || continue
      echo "  $f ($(stat -c %s "$f") bytes); reproduce: $bin $f" >&2
      # A CI log may be all that is left of the run: small inputs are printed whole.
      if (($(stat -c %s "$f") <= 4096)); then echo "  base64: $(base64 -w0 "$f")" >&2; fi
    done
    echo "  keep it as a regression seed: cp <file> tests/fuzz/corpus/$target/" >&2
  fi
  return "$rc"
}

cmd_fuzz() {
  local only="${1:-}" seconds="${2:-${TANDEM_FUZZ_SECONDS:-$FUZZ_SECONDS_DEFAULT}}" t failed=0
  local targets=("${FUZZ_TARGETS[@]}")
  if [[ -n "$only" && "$only" != all ]]; then
    if [[ ! " ${FUZZ_TARGETS[*]} " == *" $only "* ]]; then
      echo "tandem.sh: unknown fuzz target '$only' (${FUZZ_TARGETS[*]}, all)" >&2
      return 2
    fi
    targets=("$only")
  fi
  cmd_build fuzz
  # A developer's corpus persists between runs (minimize it with -merge=1 before committing any).
  for t in "${targets[@]}"; do
    fuzz_run "$t" "$seconds" "$ROOT/$(preset_dir fuzz)/corpus/$t" || failed=1
  done
  return "$failed"
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

# Each loader's fuzz target for TANDEM_FUZZ_SECONDS (45 s) from the committed seeds and the golden
# files, in a scratch corpus; every target runs even when one fails. A fuzzer is one thread, so
# TANDEM_JOBS of them run at once, each with its own log, printed whole when it ends.
step_fuzz() {
  local t failed=0 scratch
  cmd_build fuzz
  rm -rf "$(preset_dir fuzz)/findings"
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/tandem-fuzz.XXXXXX")"
  local -a pids=() names=()
  for t in "${FUZZ_TARGETS[@]}"; do
    mkdir -p "$scratch/$t"
    fuzz_run "$t" "${TANDEM_FUZZ_SECONDS:-$FUZZ_SECONDS_DEFAULT}" "$scratch/$t" \
      >"$scratch/$t.log" 2>&1 &
    pids+=($!); names+=("$t")
    if ((${#pids[@]} >= JOBS)); then
      fuzz_collect "$scratch" "${pids[0]}" "${names[0]}" || failed=1
      pids=("${pids[@]:1}"); names=("${names[@]:1}")
    fi
  done
  local i
  for i in "${!pids[@]}"; do
    fuzz_collect "$scratch" "${pids[$i]}" "${names[$i]}" || failed=1
  done
  rm -rf "$scratch"
  return "$failed"
}

# fuzz_collect SCRATCH PID TARGET: waits for one target's fuzz_run and prints its log.
fuzz_collect() {
  local rc=0
  wait "$2" || rc=$?
  cat "$1/$3.log"
  return "$rc"
}

step_tsan() {
  # atexit_sleep_ms: TSan sleeps this long at every process exit so that threads still running
  # can be caught racing (default 1000 ms, which made most of the 127 tests' 140 s). The tests
  # join their threads and the engine's workers are parked by then (Note [Draining at exit]).
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:atexit_sleep_ms=100
  # One OpenMP thread: GNU OpenMP's runtime is not built for TSan, which then cannot see its
  # synchronization and reports races inside every parallel kernel. The tests here are about
  # the engine's and the frontend's threads, not OpenMP's.
  export OMP_NUM_THREADS=1
  cmd_build tsan
  tsan_wrap ctest --test-dir build/tsan -L 'engine|concurrency' --output-on-failure -j "$JOBS"
}

cmd_test() {
  local steps=(release format consumer asan fuzz tsan)
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
    fuzz) cmd_fuzz "$@" ;;
    difftest) cmd_difftest "$@" ;;
    bench) cmd_bench "$@" ;;
    format) cmd_format ;;
    help | -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
