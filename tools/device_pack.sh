#!/usr/bin/env bash
# Packs what a GPU machine needs for backends/cuda/run_device_checks.sh, built here (the GPU
# image has CUDA, PyTorch and pytest but none of the project's libraries, and fetches nothing):
#   device-pack/bin/   mpakt, mpakt_cuda_tests, mpakt_step_bench — stripped
#   device-pack/lib/   the shared libraries they need beyond the C/C++ runtime and CUDA's
#                      (CAF 0.17, SQLite)
#   device-pack/shared/models/stories260K   the end-to-end tests' model and goldens
# and the same compressed as device-pack.txz (about 12 MB; the folder itself is about 70 MB
# with three GPU architectures' code in each binary — over the 64 MiB a working tree may carry
# to a GPU machine together with the sources).
#
# Usage: tools/device_pack.sh [build-dir]   (default build/: a build with the CUDA backend,
#        i.e. nvcc found; its binaries are rebuilt first)
# Then, on the GPU machine (device-pack.txz carried beside the working tree):
#   tar -xJf device-pack.txz && MPAKT_DEVICE_PACK=device-pack MPAKT_E2E=1 MPAKT_BENCH=1 \
#     OUT=$OUT backends/cuda/run_device_checks.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
pack=$root/device-pack
shared=$root/../shared

ninja -C "$build" -j"${MPAKT_JOBS:-2}" mpakt mpakt_cuda_tests mpakt_step_bench
for b in "$build/mpakt" "$build/test/mpakt_cuda_tests" "$build/bench/mpakt_step_bench"; do
  [[ -x $b ]] || { echo "device_pack: $b is missing (a build with nvcc found is needed)" >&2; exit 1; }
done
ldd "$build/mpakt" | grep -q libcudart || { echo "device_pack: $build/mpakt has no CUDA backend" >&2; exit 1; }

rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib" "$pack/lib-openssl" "$pack/shared/models"
strip -o "$pack/bin/mpakt" "$build/mpakt"
strip -o "$pack/bin/mpakt_cuda_tests" "$build/test/mpakt_cuda_tests"
strip -o "$pack/bin/mpakt_step_bench" "$build/bench/mpakt_step_bench"
# Libraries the binaries need that neither the C/C++ runtime nor CUDA provides.
for b in "$pack"/bin/*; do ldd "$b"; done | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  case $name in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s.so*|libstdc++.so*|ld-linux*) ;;
    libcudart*|libcublas*|libcuda.so*) ;;
    # OpenSSL 3 apart: used only where the GPU machine has none (it would serve Python too)
    libssl.so*|libcrypto.so*) cp -L "$path" "$pack/lib-openssl/$name" ;;
    *) cp -L "$path" "$pack/lib/$name" ;;
  esac
done
cp -r "$shared/models/stories260K" "$pack/shared/models/"
(cd "$root" && tar -cJf device-pack.txz device-pack)
du -sh "$pack" "$root/device-pack.txz"
ls -la "$pack/bin" "$pack/lib" "$pack/lib-openssl"
