#!/usr/bin/env bash
# Fails when an object compiled for one instruction-set level (backends/cpu/fast/*_avx2.cpp,
# *_avx512*.cpp, *_amx.cpp …) defines a weak or unique symbol: a definition another file may
# also emit (a template, an inline function, a library container), of which the linker keeps
# one copy for the whole program — possibly the one compiled for AVX-512, which then stops an
# AVX2-only CPU with SIGILL wherever the program calls it (backends/cpu/fast/isa_kernels.hpp).
# Usage: tools/check_isa_objects.sh OBJECT... (a CMake list — one argument with ';' — works too)
set -euo pipefail
objects=()
for a in "$@"; do
  IFS=';' read -r -a parts <<< "$a"
  objects+=("${parts[@]}")
done
checked=0
bad=0
for o in "${objects[@]}"; do
  case "$(basename "$o")" in
    *_avx2.cpp.o | *_avx_vnni.cpp.o | *_avx512.cpp.o | *_avx512_vnni.cpp.o | *_avx512_bf16.cpp.o | *_amx.cpp.o) ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  # (DW.ref.__gxx_personality_v0 is a data word, the same in every object: no instructions)
  shared="$(nm -C --defined-only "$o" | awk '$2 ~ /^[WVu]$/ && $3 != "DW.ref.__gxx_personality_v0" { $1 = ""; print }')"
  if [ -n "$shared" ]; then
    echo "$o defines symbols the linker may take for the whole program:" >&2
    echo "$shared" | sed 's/^/   /' >&2
    bad=1
  fi
done
if [ "$checked" -eq 0 ]; then
  echo "no per-level kernel objects among the arguments" >&2
  exit 1
fi
[ "$bad" -eq 0 ] && echo "$checked per-level kernel objects define no shared symbol"
exit "$bad"
