#!/usr/bin/python3
"""PyTorch's SDPA flash backend (torch.nn.functional.scaled_dot_product_attention under
sdpa_kernel(SDPBackend.FLASH_ATTENTION)) in bf16 on the GPU, timed as bench_attention
--device cuda times attograd's flash: B = 1, H = 8, [B, H, T, d] inputs, forward and
forward + backward (median of repeats, each waiting for the device), GFLOP/s counted
the same way (4·d per visible (query, key) pair and head forward, 2.5× that backward;
causal: T(T + 1)/2 pairs per head), peak extra device memory. Prints Markdown rows in
bench_attention's format, impl "torch-sdpa-flash", so that scripts/gpu_check.sh's
FLASH stage prints both tables together.

    python3 bench/flash_torch.py --T 4096 --d 64,128 --masks causal
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

try:  # PyTorch >= 2.3
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # 2.0 - 2.2: the backend chosen by flags
    SDPBackend = None

    def sdpa_kernel(_):
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)

BATCH, HEADS = 1, 8


def median_ms(fn, budget_s):
    """Median wall time of fn() in ms: one warm-up, then repeats until budget_s (at least 3, at most 50)."""
    fn()
    torch.cuda.synchronize()
    times, started = [], time.perf_counter()
    while len(times) < 3 or (len(times) < 50 and time.perf_counter() - started < budget_s):
        begin = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - begin) * 1000)
    return statistics.median(times)


def run_case(T, d, causal, budget_s):
    gen = torch.Generator(device="cuda").manual_seed(1)
    shape = (BATCH, HEADS, T, d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_() for _ in range(3))
    dz = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    def forward():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION if SDPBackend else None):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def forward_backward():
        forward().backward(dz)
        q.grad = k.grad = v.grad = None

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    forward_backward()
    torch.cuda.synchronize()
    peak_mb = (torch.cuda.max_memory_allocated() - before) / 2**20
    with torch.no_grad():
        forward_ms = median_ms(forward, budget_s)
    total_ms = median_ms(forward_backward, budget_s)
    return forward_ms, total_ms, peak_mb


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--T", default="4096", help="sequence lengths, comma-separated")
    parser.add_argument("--d", default="64,128", help="head widths, comma-separated")
    parser.add_argument("--masks", default="causal", help="none and/or causal, comma-separated")
    parser.add_argument("--budget-s", type=float, default=1.0, help="seconds of repeats per timing")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, device: {torch.cuda.get_device_name()}, bf16, SDPA flash backend\n")
    print("| d | T | mask | density | impl | position | fwd ms | fwd GFLOP/s | fwd+bwd ms | fwd+bwd GFLOP/s | peak extra MB fwd+bwd |")
    print("|---|---|---|---:|---|---|---:|---:|---:|---:|---:|")
    for d in (int(x) for x in args.d.split(",")):
        for T in (int(x) for x in args.T.split(",")):
            for mask in args.masks.split(","):
                causal = mask == "causal"
                pairs = HEADS * (T * (T + 1) / 2 if causal else T * T)
                flops = 4.0 * BATCH * d * pairs
                forward_ms, total_ms, peak_mb = run_case(T, d, causal, args.budget_s)
                print(f"| {d} | {T} | {mask} | {pairs / (HEADS * T * T):.4f} | torch-sdpa-flash | none | "
                      f"{forward_ms:.2f} | {flops / forward_ms / 1e6:.1f} | {total_ms:.2f} | "
                      f"{3.5 * flops / total_ms / 1e6:.1f} | {peak_mb:.1f} |", flush=True)


if __name__ == "__main__":
    main()
