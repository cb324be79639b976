#!/usr/bin/env python3
"""Rewrites a CUDA kernels file (backends/cuda/kernels/*.cu) into host C++ for the emulator
(emu.hpp): every launch `kernel<T...><<<grid, block[, smem[, stream]]>>>(args);` becomes
`emu::launch(grid, block, smem, [&] { kernel<T...>(args); });`, a dynamic shared array
`extern __shared__ T name[];` a pointer into the emulator's per-block buffer, and the
namespace mpakt::cuda::k becomes mpakt::cuda::k::emulated, so the emulated launchers never
clash with the real ones.

Usage: rewrite_launches.py SRC DST"""
import re
import sys


def split_top(s):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{':
            depth += 1
        if ch in ')]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def main():
    src = open(sys.argv[1]).read()
    count = 0

    def launch(m):
        nonlocal count
        count += 1
        name, cfg, args = m.group(1), split_top(m.group(2)), m.group(3)
        smem = cfg[2] if len(cfg) > 2 else '0'
        return f'emu::launch({cfg[0]}, {cfg[1]}, {smem}, [&] {{ {name}({args}); }});'

    src = re.sub(r'([A-Za-z_][\w:]*(?:<[^;{}]*?>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;', launch, src, flags=re.S)
    src = re.sub(r"\brow_blocks\(", "emu::capped_row_blocks(", src)
    src = re.sub(r'extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;', r'\1* \2 = emu::dyn_smem_ptr<\1>();', src)
    src, renamed = re.subn(r'namespace mpakt::cuda::k \{', 'namespace mpakt::cuda::k::emulated {', src)
    if count == 0 or '<<<' in src or 'extern __shared__' in src or renamed != 1:
        sys.exit(f'rewrite_launches: {sys.argv[1]} not rewritten whole ({count} launches, {renamed} namespaces)')
    with open(sys.argv[2], 'w') as f:
        f.write(f'// Generated from {sys.argv[1]} by test/cuda/emu/rewrite_launches.py: do not edit.\n' + src)


if __name__ == '__main__':
    main()
