#!/usr/bin/python3
"""PyTorch's composed attention (matmul, -inf mask, softmax, matmul) measured
exactly as bench/attention.cpp measures attograd's implementations: float32 on
the CPU, B*H = 8, forward and forward+backward wall time (median of repeats),
GFLOP/s counted the same way, peak extra resident memory from VmHWM reset
through /proc/self/clear_refs, each case in a process of its own. Prints
Markdown rows in bench_attention's format, with impl "pytorch". NAME: the kernel set
attograd chose, as `./build/char_lm info` names it (PyTorch chooses none itself).

    OPENBLAS_CORETYPE=NAME OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 \\
        /usr/bin/python3 bench/attention_torch.py --threads 2
"""
import argparse
import ctypes
import math
import subprocess
import sys
import time

BATCH, HEADS = 1, 8


def status_kb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


class PeakMemory:
    """Peak resident memory above the level at construction, in MB."""

    def __init__(self):
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")
            self.resettable = True
        except OSError:
            self.resettable = False
        self.baseline_kb = status_kb("VmRSS")

    def extra_mb(self):
        return (status_kb("VmHWM") - self.baseline_kb) / 1024 if self.resettable else -1


def median_ms(f, clock, budget_s, max_reps=10):
    """Median time of f() on `clock` (wall, or the process's CPU time) over at
    least one run and until budget_s of wall time have passed."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    times, start = [], time.perf_counter()
    while len(times) < max_reps and (not times or time.perf_counter() - start < budget_s):
        t0 = now()
        f()
        times.append((now() - t0) * 1000)
    return sorted(times)[len(times) // 2]


def run_case(T, d, causal, threads, clock, budget_s):
    # As bench/measure.h: blocks of 1 MB or more go back to the system when freed.
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 1 << 20)  # M_TRIM_THRESHOLD
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(1)
    q, k, v, dz = (torch.randn(BATCH, HEADS, T, d) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()
    mask = torch.full((T, T), float("-inf")).triu(1) if causal else None

    def attention():
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if mask is not None:
            s = s + mask
        return torch.softmax(s, dim=-1) @ v

    def forward_backward():
        attention().backward(dz)
        for t in (q, k, v):
            t.grad = None

    peak = PeakMemory()
    z = attention()
    forward_mb = peak.extra_mb()
    z.backward(dz)
    total_mb = peak.extra_mb()
    del z
    for t in (q, k, v):
        t.grad = None
    forward = median_ms(attention, clock, budget_s)
    total = median_ms(forward_backward, clock, budget_s)
    print(f"{forward:.3f} {total:.3f} {forward_mb:.1f} {total_mb:.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--T", default="64,256,1024,4096,16384")
    parser.add_argument("--d", default="32,64")
    parser.add_argument("--memory-limit-gb", type=float, default=4)
    parser.add_argument("--budget-s", type=float, default=2)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time (for one thread on a busy machine)")
    parser.add_argument("--case", nargs=3, metavar=("T", "d", "causal"), help="internal: run one case")
    args = parser.parse_args()
    if args.case:
        T, d, causal = map(int, args.case)
        run_case(T, d, bool(causal), args.threads, args.clock, args.budget_s)
        return
    for d in map(int, args.d.split(",")):
        for T in map(int, args.T.split(",")):
            for causal in (False, True):
                density = (T + 1) / (2 * T) if causal else 1.0  # the visible pairs over T², as bench_attention prints
                row = f"| {d} | {T} | {'causal' if causal else 'none'} | {density:.4f} | pytorch | none | "
                # S, the scaled S, S + M, A and their gradients: about 7 [B, H, T, T] tensors
                needed_gb = 7 * BATCH * HEADS * T * T * 4 / 1e9
                if needed_gb > args.memory_limit_gb:
                    print(row + f"skipped: needs about {needed_gb:.0f} GB | | | | |", flush=True)
                    continue
                out = subprocess.run(
                    [sys.executable, __file__, "--threads", str(args.threads), "--budget-s", str(args.budget_s),
                     "--clock", args.clock, "--case", str(T), str(d), str(int(causal))],
                    capture_output=True, text=True).stdout.split()
                if len(out) != 4:
                    print(row + "failed | | | | |", flush=True)
                    continue
                forward_ms, total_ms, forward_mb, total_mb = map(float, out)
                flops = 4.0 * BATCH * HEADS * d * (T * (T + 1) / 2 if causal else T * T)
                print(row + f"{forward_ms:.2f} | {flops / forward_ms / 1e6:.1f} | {total_ms:.2f} | "
                      f"{3.5 * flops / total_ms / 1e6:.1f} | {forward_mb:.1f} / {total_mb:.1f} |", flush=True)


if __name__ == "__main__":
    main()
