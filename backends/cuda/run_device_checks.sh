#!/usr/bin/env bash
# Device checks of the CUDA backend, for a machine with an NVIDIA GPU (sm_90: H100/H200).
#
# Builds mpakt_cuda_tests with nvcc and runs it: every CUDA kernel against the CPU reference
# (test/cuda/cuda_backend_test.cpp). Fails if the GPU suites were skipped (no usable device),
# so a green run means the kernels really ran.
#
# Usage: backends/cuda/run_device_checks.sh [build-dir]     (default: build-cuda)
#   MPAKT_CUDA_TESTS=path   run this prebuilt mpakt_cuda_tests instead of building. Building
#                           needs every project dependency (CAF, Boost, GTest, ...); a GPU
#                           image without them can run a binary built elsewhere: it needs
#                           only the C/C++ runtime and CUDA 13's libcudart and libcublas.
#                           With the device tool, from a CUDA build here:
#                             carry: ["build-d/test/mpakt_cuda_tests"]
#                             command: MPAKT_CUDA_TESTS=build-d/test/mpakt_cuda_tests
#                                      MPAKT_SANITIZE=1 OUT=$OUT backends/cuda/run_device_checks.sh
#   MPAKT_SANITIZE=1        also run the op table under compute-sanitizer memcheck
#   OUT=dir                 copy the logs there (the device tool's result folder)
#   CUDACXX=path            nvcc to use (default /usr/local/cuda/bin/nvcc, else PATH)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cuda}
logs=${OUT:-$build}
mkdir -p "$logs"

echo "== device"
nvidia-smi -L || echo "warning: nvidia-smi failed (no driver visible?)"

if [[ -n ${MPAKT_CUDA_TESTS:-} ]]; then
  bin=$MPAKT_CUDA_TESTS
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
  cmake --build "$build" --target mpakt_cuda_tests -j"$(nproc)" 2>&1 | tee "$logs/build.log"
  echo "build took $(($(date +%s) - start)) s"
  bin=$build/test/mpakt_cuda_tests
fi

echo "== libraries"
if ldd "$bin" | grep -q "not found"; then
  # Look for CUDA 13's runtime and cuBLAS where toolkits and pip wheels put them.
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/*/lib \
           $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
    [[ -d $d ]] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  done
fi
ldd "$bin" | grep -E "not found|cudart|cublas" || true

echo "== mpakt_cuda_tests"
set +e
"$bin" --gtest_color=no 2>&1 | tee "$logs/mpakt_cuda_tests.log"
rc=${PIPESTATUS[0]}
set -e
if grep -q "no CUDA device" "$logs/mpakt_cuda_tests.log"; then
  echo "FAIL: the GPU suites were skipped: no usable CUDA device" >&2
  rc=1
fi

if [[ ${MPAKT_SANITIZE:-0} == 1 ]]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  echo "== compute-sanitizer memcheck (op table)"
  set +e
  "$sanitizer" --tool memcheck --error-exitcode 3 "$bin" --gtest_color=no --gtest_filter='All/CudaOps.*' \
    2>&1 | tee "$logs/memcheck.log" | tail -n 40
  src=${PIPESTATUS[0]}
  set -e
  if [[ $src -ne 0 ]]; then
    echo "FAIL: compute-sanitizer exited with $src" >&2
    rc=1
  fi
fi

exit "$rc"
