#!/usr/bin/env python3
"""The GPU's ceilings measured in the benchmark's own run (backends/cuda/run_device_checks.sh):
device-to-device copy bandwidth (bytes read + written) and a bf16 8192^3 product's TFLOP/s
through PyTorch, so the GPU benchmark's numbers can be read as fractions of what this device
gives now, beside the datasheet's 4.8 TB/s and ~990 TFLOP/s."""
import torch


def timed(fn, reps):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def main():
    n = 1 << 30  # 4 GiB of f32 each way
    a = torch.empty(n, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    t = timed(lambda: b.copy_(a), 10)
    print(f"copy: {2 * 4 * n / t / 1e12:.2f} TB/s (read + write, {4 * n / 2**30:.0f} GiB each way)")
    del a, b
    x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    t = timed(lambda: x @ y, 10)
    print(f"bf16 product 8192^3: {2 * 8192**3 / t / 1e12:.0f} TFLOP/s")
    print(f"device: {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
