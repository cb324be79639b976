#!/usr/bin/env bash
# Device checks of the CUDA backend, for a machine with an NVIDIA GPU (built for sm_80, sm_89
# and sm_90: A100, L4/RTX 40xx, H100/H200).
#
# 1. mpakt_cuda_tests: every CUDA kernel against the CPU reference, and the op table's golden
#    fixtures (PyTorch, transformers) through the executor on the CUDA backend. Fails if the
#    GPU suites were skipped (no usable device), so a green run means the kernels really ran.
# 2. MPAKT_E2E=1: the end-to-end tests that need a GPU (test/e2e/test_cluster.py: a volunteer
#    that computes on it decodes stories260K's golden tokens; --backend cuda and auto), with
#    the real mpakt binary, coordinator and volunteer processes.
# 3. MPAKT_BENCH=1: decode and prefill of the Qwen3-0.6B and Llama-3-8B shapes (random bf16
#    weights drawn on the GPU: bench/gpu_models.py) through mpakt_step_bench --backend cuda,
#    against the HBM roofline (MPAKT_HBM_GBS, default 4800: an H200) and the bf16 tensor-core
#    peak (MPAKT_PEAK_TFLOPS, default 989).
# Logs and results go to $OUT (default: the build folder).
#
# Usage: backends/cuda/run_device_checks.sh [build-dir]     (default: build-cuda)
#   MPAKT_DEVICE_PACK=dir   run the binaries packed by tools/device_pack.sh (built elsewhere;
#                           a GPU image has CUDA, PyTorch and pytest but not the project's
#                           libraries). With the pack's archive carried beside the tree:
#                             tar -xJf device-pack.txz && MPAKT_DEVICE_PACK=device-pack
#                               MPAKT_E2E=1 MPAKT_BENCH=1 OUT=$OUT backends/cuda/run_device_checks.sh
#   MPAKT_CUDA_TESTS=path   run this prebuilt mpakt_cuda_tests (without a pack)
#   MPAKT_SANITIZE=1        also run the op table under compute-sanitizer memcheck
#   MPAKT_BENCH_SHAPES=list the benchmark's shapes (default qwen3,llama3-8b; bench/gpu_models.py)
#   MPAKT_BENCH_ARGS="..."  more mpakt_step_bench arguments (e.g. --profile)
#   MPAKT_PHASE_S=seconds   each phase's time limit (default 240), so one hung phase still
#                           leaves the others' results
#   MPAKT_REHEARSE=1        on a machine without a GPU: run every phase as far as it goes (the
#                           GPU suites skip, the benchmark runs the smol shape on the CPU), to
#                           check the script, the pack and the tools before device time is spent
#   OUT=dir                 where logs and results go
#   CUDACXX=path            nvcc to use when building (default /usr/local/cuda/bin/nvcc, else PATH)
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cuda}
logs=${OUT:-$build}
mkdir -p "$logs"
rehearse=${MPAKT_REHEARSE:-0}
rc=0
fail() { echo "FAIL: $*" >&2; rc=1; }

echo "== device"
nvidia-smi -L || echo "warning: nvidia-smi failed (no driver visible?)"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null | tee "$logs/device.txt"

if [[ -n ${MPAKT_DEVICE_PACK:-} ]]; then
  pack=$(cd "$MPAKT_DEVICE_PACK" && pwd)
  bin_tests=$pack/bin/mpakt_cuda_tests
  bin_mpakt=$pack/bin/mpakt
  bin_bench=$pack/bin/mpakt_step_bench
  export LD_LIBRARY_PATH=$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export MPAKT_SHARED_DIR=$pack/shared
elif [[ -n ${MPAKT_CUDA_TESTS:-} ]]; then
  bin_tests=$MPAKT_CUDA_TESTS
  bin_mpakt=$root/build/mpakt
  bin_bench=$root/build/bench/mpakt_step_bench
else
  nvcc=${CUDACXX:-}
  if [[ -z $nvcc ]]; then
    if [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; else nvcc=$(command -v nvcc); fi
  fi
  echo "== configure ($nvcc)"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$root" -B "$build" "${gen[@]}" -DMPAKT_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DMPAKT_CUDA_ARCHS=90 2>&1 | tee "$logs/configure.log"
  echo "== build"
  start=$(date +%s)
  cmake --build "$build" --target mpakt mpakt_cuda_tests mpakt_step_bench -j"$(nproc)" 2>&1 | tee "$logs/build.log"
  echo "build took $(($(date +%s) - start)) s"
  bin_tests=$build/test/mpakt_cuda_tests
  bin_mpakt=$build/mpakt
  bin_bench=$build/bench/mpakt_step_bench
fi

echo "== libraries"
need_libs() { for b in "$bin_tests" "$bin_mpakt" "$bin_bench"; do [[ -x $b ]] && ldd "$b"; done | grep "not found" | sort -u; }
if [[ -n $(need_libs) ]]; then
  # CUDA 13's runtime and cuBLAS where toolkits and pip wheels put them
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/*/lib \
           $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
    [[ -d $d ]] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH${LD_LIBRARY_PATH:+:}$d
  done
fi
if [[ -n ${pack:-} ]] && need_libs | grep -q -E "libssl|libcrypto"; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$pack/lib-openssl  # (the machine has no OpenSSL 3 of its own)
fi
need_libs | tee "$logs/missing-libraries.txt"
[[ -s $logs/missing-libraries.txt ]] && fail "libraries not found (above)"

echo "== mpakt_cuda_tests"
# the op table's fixtures, read by the packed binary from this tree
export MPAKT_FIXTURES_DIR=${MPAKT_FIXTURES_DIR:-$root/test/fixtures}
timeout "${MPAKT_PHASE_S:-240}" "$bin_tests" --gtest_color=no 2>&1 | tee "$logs/mpakt_cuda_tests.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "mpakt_cuda_tests"
if grep -q "no CUDA device" "$logs/mpakt_cuda_tests.log"; then
  if [[ $rehearse == 1 ]]; then echo "(rehearsal: the GPU suites skipped, as they must without a device)"
  else fail "the GPU suites were skipped: no usable CUDA device"; fi
fi

if [[ ${MPAKT_SANITIZE:-0} == 1 ]]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  echo "== compute-sanitizer memcheck (op table)"
  timeout "${MPAKT_PHASE_S:-240}" "$sanitizer" --tool memcheck --error-exitcode 3 "$bin_tests" --gtest_color=no --gtest_filter='All/CudaOps.*' \
    2>&1 | tee "$logs/memcheck.log" | tail -n 40
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail "compute-sanitizer memcheck"
fi

if [[ ${MPAKT_E2E:-0} == 1 ]]; then
  echo "== end-to-end tests on the GPU"
  (cd "$root" && MPAKT_BINARY=$bin_mpakt PYTHONUNBUFFERED=1 timeout "${MPAKT_PHASE_S:-240}" python3 -m pytest -q -p no:cacheprovider -rs \
     --basetemp="${TMPDIR:-/tmp}/mpakt-device-e2e" test/e2e/test_cluster.py -k "gpu or backend_asked" \
     2>&1 | tee "$logs/e2e.log")
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail "end-to-end tests"
  if [[ $rehearse != 1 ]] && grep -q "SKIPPED" "$logs/e2e.log"; then fail "an end-to-end GPU test was skipped"; fi
fi

if [[ ${MPAKT_BENCH:-0} == 1 ]]; then
  if [[ $rehearse != 1 ]]; then
    echo "== ceilings measured in this run (PyTorch: device copy, bf16 8192^3 product)"
    timeout 60 python3 "$root/bench/gpu_ceilings.py" 2>&1 | tee "$logs/ceilings.txt"
  fi
  echo "== benchmark"
  models=${MPAKT_BENCH_MODELS:-${TMPDIR:-/tmp}/mpakt-gpu-models}
  shapes=${MPAKT_BENCH_SHAPES:-qwen3,llama3-8b}
  backend=cuda
  if [[ $rehearse == 1 ]]; then shapes=${MPAKT_BENCH_SHAPES:-smol}; backend=cpu; fi
  start=$(date +%s)
  python3 "$root/bench/gpu_models.py" "$models" --shapes "$shapes" > "$logs/models.txt" || fail "writing the benchmark's models"
  echo "models written in $(($(date +%s) - start)) s"
  while IFS=$'\t' read -r shape folder; do
    echo "-- $shape ($backend)"
    # shellcheck disable=SC2086
    timeout "${MPAKT_PHASE_S:-240}" "$bin_bench" "$folder" --backend "$backend" --prefill 128 \
      --tokens "${MPAKT_BENCH_TOKENS:-16}" --repeats 1 ${MPAKT_BENCH_ARGS:-} --roofline-gbs "${MPAKT_HBM_GBS:-4800}" --peak-tflops "${MPAKT_PEAK_TFLOPS:-989}" 2>&1 | tee "$logs/bench-$shape.txt"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || fail "benchmark of $shape"
  done < "$logs/models.txt"
fi

exit "$rc"
