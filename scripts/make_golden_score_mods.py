"""Golden values for softmax attention's score modifiers (ag::ScoreMods, core/ops.h), from PyTorch in float64.

    /usr/bin/python3 scripts/make_golden_score_mods.py   # writes tests/golden/score_mods.safetensors

The reference is written here from the modifiers' definitions (docs/backprop.md, "Score modifiers and
their adjoints"), with torch's own ops and autograd, per batch entry b, head h, query i, key j:
    S = scale · Q Kᵀ,  u = S + rel[h, bucket(j − i)] + idx[h, index(i, j)],  S' = cap·tanh(u / cap),
    A = softmax over [S' + M, sink_h] with the sink's column dropped,  Z = A V,
M = −∞ above the diagonal (causal) and 0 elsewhere. bucket() is T5's rule (Raffel et al. 2020), written
from its formula as T5's code forms it (the logarithm in float32); the file holds its buckets for the
relative positions −300 … 300 of three settings, which tests/test_score_mods.cpp compares with
attograd's relative_position_bucket.

Cases (q, k, v [2, 3, 7, 4] BHTD, scale 1/√4, loss = sum(Z ∘ R), R a fixed random tensor):
    relative         the relative table [3, 8] (bidirectional, max_distance 5), not causal
    relative_causal  the relative table [3, 6] (unidirectional, max_distance 5), causal
    capped           soft_cap 1.5, causal
    sinks            sinks [3], causal
    all              soft_cap 2, sinks, the relative table [3, 8] (bidirectional) and an indexed
                     table [3, 4] read through index [7, 7], causal
For each case <c>: <c>.q, <c>.k, <c>.v, <c>.R, the modifiers' tensors (<c>.sinks, <c>.relative,
<c>.indexed, <c>.index), <c>.out and <c>.grad.<name> for q, k, v and each learnable tensor. All F64
(the index too: small integers, exact); written by scripts/make_golden_block.py's write_safetensors.
"""
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden_block import write_safetensors  # noqa: E402

B, H, T, D = 2, 3, 7, 4
OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "score_mods.safetensors"


def relative_bucket(relative, bidirectional, num_buckets, max_distance, dtype=torch.float32):
    """T5's bucket of relative positions j − i (a long tensor), the logarithm formed in `dtype`."""
    bucket = torch.zeros_like(relative)
    n = -relative  # > 0: the key is before the query
    if bidirectional:
        num_buckets //= 2
        bucket += (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    max_exact = num_buckets // 2
    ratio = torch.log(n.to(dtype) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (ratio * (num_buckets - max_exact)).to(torch.long)).clamp(max=num_buckets - 1)
    return bucket + torch.where(n < max_exact, n, large)


def attention(q, k, v, causal, cap=None, sinks=None, relative=None, indexed=None, index=None):
    S = q @ k.transpose(-1, -2) / math.sqrt(D)
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    if relative is not None:
        table, bidirectional, max_distance = relative
        S = S + table[:, relative_bucket(j - i, bidirectional, table.shape[1], max_distance)]
    if indexed is not None:
        S = S + indexed[:, index]
    if cap is not None:
        S = cap * torch.tanh(S / cap)
    if causal:
        S = S.masked_fill(j > i, float("-inf"))
    if sinks is not None:
        column = sinks.view(1, H, 1, 1).expand(B, H, T, 1)
        A = torch.softmax(torch.cat([S, column], dim=-1), dim=-1)[..., :T]
    else:
        A = torch.softmax(S, dim=-1)
    return A @ v


def main():
    gen = torch.Generator().manual_seed(50)

    def randn(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_(True)

    tensors = {}
    positions = torch.arange(-300, 301)
    tensors["buckets.bidirectional"] = relative_bucket(positions, True, 32, 128).double()
    tensors["buckets.unidirectional"] = relative_bucket(positions, False, 32, 128).double()
    tensors["buckets.small"] = relative_bucket(positions, True, 8, 5).double()
    # attograd forms the logarithm in float64: the same buckets here
    for name, settings in (("buckets.bidirectional", (True, 32, 128)), ("buckets.unidirectional", (False, 32, 128)),
                           ("buckets.small", (True, 8, 5))):
        assert torch.equal(relative_bucket(positions, *settings).double(), tensors[name])
        assert torch.equal(relative_bucket(positions, *settings, dtype=torch.float64).double(), tensors[name]), name

    cases = {
        "relative": dict(causal=False, relative=(8, True, 5)),
        "relative_causal": dict(causal=True, relative=(6, False, 5)),
        "capped": dict(causal=True, cap=1.5),
        "sinks": dict(causal=True, sinks=True),
        "all": dict(causal=True, cap=2.0, sinks=True, relative=(8, True, 5), indexed=4),
    }
    for case, spec in cases.items():
        q, k, v = randn(B, H, T, D), randn(B, H, T, D), randn(B, H, T, D)
        R = torch.randn(B, H, T, D, generator=gen, dtype=torch.float64)
        learn = {"q": q, "k": k, "v": v}
        kwargs = dict(causal=spec["causal"], cap=spec.get("cap"))
        if spec.get("sinks"):
            learn["sinks"] = kwargs["sinks"] = randn(H)
        if "relative" in spec:
            buckets, bidirectional, max_distance = spec["relative"]
            learn["relative"] = randn(H, buckets, scale=0.5)
            kwargs["relative"] = (learn["relative"], bidirectional, max_distance)
        if "indexed" in spec:
            n = spec["indexed"]
            learn["indexed"] = kwargs["indexed"] = randn(H, n, scale=0.5)
            kwargs["index"] = torch.randint(0, n, (T, T), generator=gen)
            tensors[case + ".index"] = kwargs["index"].double()
        out = attention(q, k, v, **kwargs)
        (out * R).sum().backward()
        tensors[case + ".R"] = R
        tensors[case + ".out"] = out
        for name, t in learn.items():
            tensors[f"{case}.{name}"] = t
            tensors[f"{case}.grad.{name}"] = t.grad
    write_safetensors(OUT, tensors, {"torch": torch.__version__, "script": "scripts/make_golden_score_mods.py"})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
