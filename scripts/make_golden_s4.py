#!/usr/bin/python3
"""Golden numbers for tests/test_s4.cpp: S4D's kernel and layer in PyTorch float64, complex autograd.

    /usr/bin/python3 scripts/make_golden_s4.py   # writes tests/golden/s4d.safetensors

The reference is written from the formulas (S4D, Gu et al. 2022, ZOH and the Vandermonde kernel),
with torch's complex tensors and its autograd through them, independently of attograd's hand
derivation. The convolution is the direct sum y_t = Σ_{j≤t} K_{t−j} u_j (not an FFT), so the
golden file also checks attograd's FFT. Parameters in attograd's real form (core/ops.h,
S4dParameters): log_dt [H], log_A_re, A_im [H, N/2], B, C [H, N/2, 2] (re, im), D [H].
The loss is Σ R·y (R random), so the gradients are those of y against the upstream gradient R;
the kernel's own gradients come from Σ RK·K with another random RK.
"""
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden_block import write_safetensors  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "s4d.safetensors"
B, T, H, N2 = 2, 37, 3, 4


def kernel(log_dt, log_A_re, A_im, Bp, Cp, length):
    dt = torch.exp(log_dt)[:, None]                         # [H, 1]
    A = torch.complex(-torch.exp(log_A_re), A_im)           # [H, N/2]
    Bc = torch.complex(Bp[..., 0], Bp[..., 1])
    Cc = torch.complex(Cp[..., 0], Cp[..., 1])
    dtA = dt * A
    Bbar = (torch.exp(dtA) - 1) / A * Bc                    # ZOH
    ell = torch.arange(length, dtype=torch.float64)
    powers = torch.exp(dtA[..., None] * ell)                # [H, N/2, T]: exp(ℓ Δ A)
    return 2 * torch.einsum("hn,hnl->hl", Cc * Bbar, powers).real


def layer(u, log_dt, log_A_re, A_im, Bp, Cp, D):
    K = kernel(log_dt, log_A_re, A_im, Bp, Cp, u.shape[1])
    y = torch.zeros_like(u)
    for t in range(u.shape[1]):                             # the direct causal convolution
        y[:, t, :] = (K[:, : t + 1].flip(-1).T[None] * u[:, : t + 1, :]).sum(1)
    return y + D * u


def main():
    gen = torch.Generator().manual_seed(52)
    f64 = dict(generator=gen, dtype=torch.float64)
    params = {
        "log_dt": math.log(0.01) + torch.rand(H, **f64) * (math.log(0.3) - math.log(0.01)),
        "log_A_re": math.log(0.5) + 0.3 * torch.randn(H, N2, **f64),
        "A_im": math.pi * torch.arange(N2, dtype=torch.float64).repeat(H, 1) + 0.1 * torch.randn(H, N2, **f64),
        "B": torch.randn(H, N2, 2, **f64),
        "C": torch.randn(H, N2, 2, **f64) * math.sqrt(0.5),
        "D": torch.randn(H, **f64),
    }
    u = torch.randn(B, T, H, **f64)
    R = torch.randn(B, T, H, **f64)
    RK = torch.randn(H, T, **f64)
    for t in [u, *params.values()]:
        t.requires_grad_(True)

    names = ["log_dt", "log_A_re", "A_im", "B", "C"]
    K = kernel(*(params[n] for n in names), T)
    kernel_grads = torch.autograd.grad((K * RK).sum(), [params[n] for n in names])
    y = layer(u, *(params[n] for n in names), params["D"])
    (y * R).sum().backward()

    tensors = {"u": u, "R": R, "RK": RK, "K": K, "y": y, "grad.u": u.grad}
    tensors.update(params)
    for n, g in zip(names, kernel_grads):
        tensors["kernel_grad." + n] = g
    for n, p in params.items():
        tensors["grad." + n] = p.grad
    write_safetensors(OUT, tensors, {"source": "scripts/make_golden_s4.py", "torch": torch.__version__,
                                     "B": str(B), "T": str(T), "H": str(H), "N/2": str(N2)})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
