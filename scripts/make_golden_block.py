"""Golden values for one pre-LN transformer Block, from PyTorch in float64.

    /usr/bin/python3 scripts/make_golden_block.py   # writes tests/golden/block.safetensors

The Block is written out in plain torch, in attograd's conventions: Linear
weights stored [in, out] with y = x @ W + b, exact-erf GELU, causal softmax,
LayerNorm with eps 1e-5, MLP hidden width 4C:

    y   = x + attn(ln1(x))
    out = y + mlp(ln2(y))

For loss = sum(out * R), with R a fixed random tensor, the file holds (all F64):
    x, R, out                         [B, T, C]
    <parameter name>                  e.g. "attn.w_q.weight" [C, C]
    grad.x, grad.<parameter name>     dL/dx and dL/d(parameter)
tests/test_attention_module.cpp loads it (no torch at test time).

The safetensors file is written by hand (8-byte little-endian header length,
JSON header, raw little-endian bytes), so no `safetensors` package is needed.
"""
import json
import math
import struct
from pathlib import Path

import torch

B, T, C, H = 2, 7, 16, 4
D_H = C // H
OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "block.safetensors"


def make_parameters(gen):
    """Named parameters in the Block's registration order (ln1, attn, ln2, mlp)."""
    def randn(*shape, std=1.0, mean=0.0):
        return mean + std * torch.randn(*shape, generator=gen, dtype=torch.float64)

    def linear(prefix, n_in, n_out):
        return {f"{prefix}.weight": randn(n_in, n_out, std=1 / math.sqrt(n_in)),
                f"{prefix}.bias": randn(n_out, std=0.1)}

    def layer_norm(prefix):
        # Not the 1/0 init: the gradients then test the scale and shift too.
        return {f"{prefix}.weight": randn(C, std=0.1, mean=1.0), f"{prefix}.bias": randn(C, std=0.1)}

    params = layer_norm("ln1")
    for name in ("w_q", "w_k", "w_v", "w_o"):
        params.update(linear(f"attn.{name}", C, C))
    params.update(layer_norm("ln2"))
    params.update(linear("mlp.fc", C, 4 * C))
    params.update(linear("mlp.proj", 4 * C, C))
    return params


def block(x, p):
    def linear(h, prefix):
        return h @ p[f"{prefix}.weight"] + p[f"{prefix}.bias"]

    def layer_norm(h, prefix):
        return torch.nn.functional.layer_norm(h, (C,), p[f"{prefix}.weight"], p[f"{prefix}.bias"], eps=1e-5)

    def attention(h):
        def heads(t):  # [B, T, C] -> [B, H, T, d_h]
            return t.reshape(B, T, H, D_H).transpose(1, 2)

        q, k, v = (heads(linear(h, f"attn.{name}")) for name in ("w_q", "w_k", "w_v"))
        s = q @ k.transpose(-2, -1) / math.sqrt(D_H)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        a = torch.softmax(s.masked_fill(future, float("-inf")), dim=-1)
        z = (a @ v).transpose(1, 2).reshape(B, T, C)
        return linear(z, "attn.w_o")

    def mlp(h):
        return linear(torch.nn.functional.gelu(linear(h, "mlp.fc"), approximate="none"), "mlp.proj")

    y = x + attention(layer_norm(x, "ln1"))
    return y + mlp(layer_norm(y, "ln2"))


def write_safetensors(path, tensors, metadata):
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype("<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # pad the header to a multiple of 8 bytes
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)


def main():
    gen = torch.Generator().manual_seed(1234)
    params = make_parameters(gen)
    x = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    r = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    for t in [x, *params.values()]:
        t.requires_grad_(True)

    out = block(x, params)
    (out * r).sum().backward()

    tensors = {"x": x, "R": r, "out": out}
    tensors.update(params)
    tensors["grad.x"] = x.grad
    tensors.update({f"grad.{name}": t.grad for name, t in params.items()})
    write_safetensors(OUT, tensors, {"source": "scripts/make_golden_block.py", "torch": torch.__version__,
                                     "shape": f"B={B} T={T} C={C} H={H}"})
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(tensors)} tensors)")


if __name__ == "__main__":
    main()
