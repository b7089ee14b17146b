"""Checks `char_lm grads` against PyTorch in float64, for both GELU variants,
a sparse attention pattern, grouped-query attention, a linear-attention model (elu1),
each position encoding (rope, alibi, none) and ssd (Mamba-2's state space) models.

    /usr/bin/python3 scripts/compare_grads.py --char-lm build/char_lm
    /usr/bin/python3 scripts/compare_grads.py --write-golden   # tests/golden/grads_<variant>.safetensors
    /usr/bin/python3 scripts/compare_grads.py --write-golden --variants ssd,ssd_plain   # only these

For each variant (GELU erf, GELU tanh, "sparse": erf with the pattern
SPARSE below, over a longer context so that every part of it matters,
"gqa": 4 query heads over 2 kv heads, query head h reading kv head h // 2 as
torch's repeat_interleave, and "linear_elu1": erf GELU and causal linear attention,
o_i = Σ_{j≤i} (φ(q_i)·φ(k_j)) v_j / (Σ_{j≤i} φ(q_i)·φ(k_j) + 1e-6) with
φ(x) = elu(x) + 1 and no 1/√d_h; then the positions: "rope" rotates q and k
of every head at positions 0 … T−1 (GPT-NeoX rotate_half, f_i = base^(−2i/d_h)),
"rope_gqa" the same with rope_base 500 and 4 query heads over 2 kv heads (k
rotated per kv head), "alibi" adds −m_h·(i − j), m_h = 2^(−8(h+1)/H) (H = 2: either
alibi_slopes rule), to the scores before the mask, "alibi_sparse" with the sparse pattern, and "none"
adds nothing; these have no pos_emb, and T may exceed block_size; then ssd,
below: "ssd" with its defaults ssd_conv 4 and ssd_gate true, "ssd_plain" with
neither convolution nor gate, "ssd_gqa_conv3" with a convolution of width 3,
4 query heads over 2 kv heads and position none at T = 11) it builds a small random model with
attograd's parameter names (random weights, not the GPT init, so that no
gradient is tiny), rounds the weights to float32, and writes

    W.safetensors  every parameter (F32), the config in __metadata__
                   (n_layer, n_head, n_embd, block_size, vocab_size, gelu; n_kv_head for gqa;
                   attention, ssd_conv, ssd_gate for ssd, booleans as "true" / "false")
    B.safetensors  idx and targets [B, T], int64 (and again as int32)

then runs `char_lm grads --weights W --batch B --out G` once per batch dtype
and the same forward and backward in torch float64 (the float32 weights
upcast). It prints the normwise relative error max|a - b| / max|b| of the loss
and of every gradient (attn.w_k.bias's gradient is 0 in exact arithmetic, so
its error is taken relative to attn.w_k.weight's), and exits 1 if any exceeds
1e-10. attograd computes and writes the gradients in float64, so what remains
is the two frameworks' different orders of summation (about 1e-15).

The model, in attograd's conventions (nn/gpt.h): pre-LN blocks, Linear weights
stored [in, out] with y = x @ W + b, LayerNorm eps 1e-5, causal attention with
scale 1/sqrt(d_h), MLP width 4C, head tied to the token embedding,
loss = mean cross-entropy. T is one less than block_size, so the last row of
pos_emb is unused (its gradient is 0).

ssd (attention = ssd; nn/attention.h, core/ops.h), per layer on the block's
LayerNorm output x [B, T, C]: u = [x W_Q + b_Q | x W_K + b_K | x W_V + b_V];
with ssd_conv = W > 0, u'_{t,c} = SiLU(conv.bias_c + Σ_{s<W} conv.weight[s, c]
u_{t−W+1+s, c}) (u before t = 0 being 0; W = 0: u' = u), split back into q, k, v
(k, v over H_kv heads, shared as gqa); per query head h, Δ_t = softplus(x_t
w_dt.weight[:, h] + w_dt.bias[h]), λ_t = −exp(a_log[h]) Δ_t and
    o_t = Σ_{s≤t} exp(Σ_{r=s+1..t} λ_r) (q_t·k_s) Δ_s v_s + d_skip[h] v_t
(no scale, no normaliser), written as the masked quadratic form with the
segment sums Σ_{r=s+1..t} λ_r summed directly; the heads merged, with ssd_gate
times SiLU(x W_g + b_g), then W_O. ssd's key bias is not shift-invariant.

The sparse variant's mask is written here again from the definition
(core/attention_math.h, docs/backprop.md "Sparse attention"), random blocks
included: SplitMix64 keyed by (attn_seed, layer, head, query block) and
Floyd's draw of R distinct earlier blocks of 16. The comparison runs
`char_lm grads` once per --attn-impl (composed, dense, flash).

--write-golden writes, instead of comparing, one file per variant for
tests/test_char_lm_grads.cpp (which never imports torch):

    __metadata__      the model config, as W.safetensors has it (+ "source")
    weight/<name>     every parameter, F32 (the values both sides start from)
    batch/idx         [B, T] I64
    batch/targets     [B, T] I64
    loss              [] F64, torch's float64 loss
    grad/<name>       torch's float64 gradient of every parameter, F64

safetensors files are read and written by hand (8-byte little-endian header
length, JSON header padded to 8 bytes, raw little-endian bytes): no
`safetensors` package is needed.
"""
import argparse
import json
import math
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

BASE_CONFIG = {"n_layer": 2, "n_head": 2, "n_embd": 12, "block_size": 8, "vocab_size": 11}
# Window 4 with dilation 2, 3 global keys, 1 random block of 16 per block of 16
# queries: at T = 47 the random blocks reach past the window and the globals.
SPARSE = {"attn_window": 4, "attn_dilation": 2, "attn_global": 3, "attn_random_blocks": 1, "attn_seed": 5}
VARIANTS = {  # name: (gelu, config, B, T)
    "erf": ("erf", BASE_CONFIG, 3, 7),
    "tanh": ("tanh", BASE_CONFIG, 3, 7),
    "sparse": ("erf", {**BASE_CONFIG, "block_size": 48, **SPARSE}, 2, 47),
    "gqa": ("erf", {**BASE_CONFIG, "n_head": 4, "n_kv_head": 2}, 3, 7),
    "linear_elu1": ("erf", {**BASE_CONFIG, "attention": "linear", "feature_map": "elu1"}, 3, 7),
    # positions other than learned have no pos_emb and run past block_size (T = 11 > 8)
    "rope": ("erf", {**BASE_CONFIG, "position": "rope"}, 3, 11),
    "rope_gqa": ("erf", {**BASE_CONFIG, "n_embd": 16, "n_head": 4, "n_kv_head": 2, "position": "rope",
                         "rope_base": 500}, 3, 11),
    "alibi": ("erf", {**BASE_CONFIG, "position": "alibi"}, 3, 11),
    "alibi_sparse": ("erf", {**BASE_CONFIG, "block_size": 48, **SPARSE, "position": "alibi"}, 2, 47),
    "none": ("erf", {**BASE_CONFIG, "position": "none"}, 3, 11),
    # ssd: Mamba-2's selective state space, with its defaults (a width-4 convolution and the gate),
    # with neither, and with a width-3 convolution over 4 query heads sharing 2 kv heads, past block_size
    "ssd": ("erf", {**BASE_CONFIG, "attention": "ssd"}, 3, 7),
    "ssd_plain": ("erf", {**BASE_CONFIG, "attention": "ssd", "ssd_conv": 0, "ssd_gate": False}, 3, 7),
    "ssd_gqa_conv3": ("erf", {**BASE_CONFIG, "n_embd": 16, "n_head": 4, "n_kv_head": 2, "attention": "ssd",
                              "ssd_conv": 3, "position": "none"}, 3, 11),
}
# The variants compared under every --attn-impl (the others: dense, with an int64 and an int32 batch).
EVERY_IMPL = {"sparse", "rope_gqa", "alibi", "alibi_sparse"}
SPARSE_BLOCK = 16
CONFIG = BASE_CONFIG  # the variant being run (main sets it)
B, T = 3, 7
TOLERANCE = 1e-10
GOLDEN_DIR = Path(__file__).resolve().parent.parent / "tests" / "golden"

DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4")}


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: numpy array}, written in order with the array's own dtype."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        code = {np.float32: "F32", np.float64: "F64", np.int64: "I64", np.int32: "I32"}[a.dtype.type]
        data = np.ascontiguousarray(a, dtype=DTYPES[code]).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)


def read_safetensors(path):
    """-> ({name: numpy array}, metadata)"""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return tensors, metadata


def kv_heads(config):
    return config.get("n_kv_head", config["n_head"])


def position(config):
    return config.get("position", "learned")


def ssd_conv(config):
    return config.get("ssd_conv", 4) if config.get("attention") == "ssd" else 0


def ssd_gate(config):
    return config.get("ssd_gate", True) if config.get("attention") == "ssd" else False


def parameter_shapes(config):
    """attograd's parameter names and shapes, in its registration order."""
    C, V = config["n_embd"], config["vocab_size"]
    C_kv = kv_heads(config) * (C // config["n_head"])  # W_K, W_V: H_kv heads of d_h columns
    shapes = {"tok_emb.weight": (V, C)}
    if position(config) == "learned":
        shapes["pos_emb.weight"] = (config["block_size"], C)
    for i in range(config["n_layer"]):
        p = f"blocks.{i}"
        shapes.update({f"{p}.ln1.weight": (C,), f"{p}.ln1.bias": (C,)})
        for name, width in (("w_q", C), ("w_k", C_kv), ("w_v", C_kv), ("w_o", C)):
            shapes.update({f"{p}.attn.{name}.weight": (C, width), f"{p}.attn.{name}.bias": (width,)})
        if config.get("attention") == "ssd":  # then conv, w_dt, a_log, d_skip, w_g (nn/attention.cpp)
            H = config["n_head"]
            if ssd_conv(config) > 0:
                shapes.update({f"{p}.attn.conv.weight": (ssd_conv(config), C + 2 * C_kv),
                               f"{p}.attn.conv.bias": (C + 2 * C_kv,)})
            shapes.update({f"{p}.attn.w_dt.weight": (C, H), f"{p}.attn.w_dt.bias": (H,),
                           f"{p}.attn.a_log": (H,), f"{p}.attn.d_skip": (H,)})
            if ssd_gate(config):
                shapes.update({f"{p}.attn.w_g.weight": (C, C), f"{p}.attn.w_g.bias": (C,)})
        shapes.update({f"{p}.ln2.weight": (C,), f"{p}.ln2.bias": (C,)})
        shapes.update({f"{p}.mlp.fc.weight": (C, 4 * C), f"{p}.mlp.fc.bias": (4 * C,)})
        shapes.update({f"{p}.mlp.proj.weight": (4 * C, C), f"{p}.mlp.proj.bias": (C,)})
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def random_model(rng, config):
    """Every parameter ~ N(0, 0.3) but LayerNorm weights ~ N(1, 0.1); rounded to float32.
    (ssd's a_log and w_dt too: exp(a_log) ≈ 1 and Δ = softplus(·) ≈ 0.7, a decay of about
    e^−0.7 per step, so that every earlier position matters.)"""
    weights = {}
    for name, shape in parameter_shapes(config).items():
        module = name.split(".")[-2]  # "ln1", "w_q", "tok_emb", ...
        is_ln_weight = module.startswith("ln") and name.endswith(".weight")
        w = rng.normal(1.0, 0.1, shape) if is_ln_weight else rng.normal(0.0, 0.3, shape)
        weights[name] = w.astype(np.float32)
    return weights


def random_batch(rng, config):
    V = config["vocab_size"]
    return rng.integers(0, V, (B, T), dtype=np.int64), rng.integers(0, V, (B, T), dtype=np.int64)


MASK64 = (1 << 64) - 1


def random_bits(seed, counter):
    """SplitMix64's finaliser over (seed, counter), as core/random.h."""
    z = (seed + (counter + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def random_blocks(layer, head, query_block):
    """The R distinct key blocks below query_block drawn for (attn_seed, layer, head)."""
    R = CONFIG.get("attn_random_blocks", 0)
    if query_block <= R:
        return set(range(query_block))
    stream = random_bits(random_bits(random_bits(CONFIG["attn_seed"], layer), head), query_block)
    chosen = []
    for t in range(query_block - R, query_block):
        x = random_bits(stream, t) % (t + 1)
        chosen.append(t if x in chosen else x)
    return set(chosen)


def hidden_keys(Tn, layer, head):
    """[T, T] bool, True where query i may not see key j."""
    W, dilation, G = CONFIG.get("attn_window", 0), CONFIG.get("attn_dilation", 1), CONFIG.get("attn_global", 0)
    hidden = torch.ones(Tn, Tn, dtype=torch.bool)
    for i in range(Tn):
        drawn = random_blocks(layer, head, i // SPARSE_BLOCK)
        for j in range(i + 1):
            window = W == 0 or (i - j < W * dilation and (i - j) % dilation == 0)
            hidden[i, j] = not (window or j < G or j // SPARSE_BLOCK in drawn)
    return hidden


def rope(t, base):
    """[B, n, T, d] rotated at positions 0 … T−1: x' = [x1 c − x2 s, x2 c + x1 s], angle p·base^(−2i/d)."""
    Tn, d = t.shape[-2], t.shape[-1]
    half = d // 2
    frequencies = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    angles = torch.arange(Tn, dtype=torch.float64)[:, None] * frequencies[None, :]  # [T, d/2]
    c, s = torch.cos(angles), torch.sin(angles)
    x1, x2 = t[..., :half], t[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def get_slopes(n):
    """ALiBi's slopes for n heads, as Press et al.'s get_slopes (ofirpress/attention_with_linear_biases)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_2(c) + get_slopes(2 * c)[0::2][: n - c]


def alibi_bias(Tn, H):
    """[H, T, T]: −m_h·(i − j); m_h = get_slopes(H)[h] under alibi_slopes = reference, 2^(−8(h+1)/H)
    under geometric, which a config without the key means (as attograd reads a file without it).
    The two agree for H a power of two, as in every variant here."""
    if CONFIG.get("alibi_slopes", "geometric") == "reference":
        slopes = torch.tensor(get_slopes(H), dtype=torch.float64)
    else:
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float64)
    distance = torch.arange(Tn, dtype=torch.float64)[:, None] - torch.arange(Tn, dtype=torch.float64)[None, :]
    return -slopes[:, None, None] * distance[None, :, :]


def linear_elu1_attention(q, k, v):
    """Causal linear attention with phi = elu + 1, as the masked quadratic form (core/ops.h)."""
    Tn = q.shape[-2]
    a = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)
    a = a * torch.tril(torch.ones(Tn, Tn, dtype=a.dtype))
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)


def segment_sums(lam):
    """lam [..., T] -> [..., T, T]: Σ_{r=j+1..i} lam_r at (i, j), each summed directly (0 on the diagonal
    and, unused, above it)."""
    Tn = lam.shape[-1]
    i, j, r = (torch.arange(Tn)[:, None, None], torch.arange(Tn)[None, :, None], torch.arange(Tn)[None, None, :])
    terms = ((j < r) & (r <= i)).to(lam.dtype)  # [T (i), T (j), T (r)]
    return torch.einsum("ijr,...r->...ij", terms, lam)


def ssd_attention(q, k, v, dt, a_log, d_skip):
    """q, k, v [B, H, T, d] (k, v repeated per query head), dt [B, H, T], a_log, d_skip [H] ->
    o_i = Σ_{j≤i} exp(Σ_{r=j+1..i} λ_r) (q_i·k_j) Δ_j v_j + D v_i, λ = −exp(a_log)·Δ, as the
    masked quadratic form."""
    Tn = q.shape[-2]
    lam = -torch.exp(a_log)[None, :, None] * dt
    hidden = ~torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    decay = torch.exp(segment_sums(lam).masked_fill(hidden, float("-inf")))  # 0 above the diagonal
    a = (q @ k.transpose(-2, -1)) * decay * dt[..., None, :]
    return a @ v + d_skip[None, :, None, None] * v


def causal_conv1d(u, weight, bias):
    """u [B, T, C], weight [W, C], bias [C] -> bias_c + Σ_{s<W} weight[s, c] u_{t−W+1+s, c}, u before 0 being 0."""
    W, Tn = weight.shape[0], u.shape[1]
    padded = F.pad(u, (0, 0, W - 1, 0))  # W − 1 zero rows before t = 0
    return bias + sum(weight[s] * padded[:, s:s + Tn] for s in range(W))


def torch_loss_and_grads(weights, idx, targets, gelu):
    """The model in torch float64 -> (loss, {name: gradient}), numpy float64."""
    p = {name: torch.tensor(w, dtype=torch.float64, requires_grad=True) for name, w in weights.items()}
    C, H, H_kv = CONFIG["n_embd"], CONFIG["n_head"], kv_heads(CONFIG)
    D_H = C // H
    idx_t, targets_t = torch.from_numpy(idx), torch.from_numpy(targets)
    Bn, Tn = idx.shape

    def linear(h, prefix):
        return h @ p[f"{prefix}.weight"] + p[f"{prefix}.bias"]

    def layer_norm(h, prefix):
        return F.layer_norm(h, (C,), p[f"{prefix}.weight"], p[f"{prefix}.bias"], eps=1e-5)

    def attention(h, prefix, layer):
        def heads(t, n):  # [B, T, n·d_h] -> [B, n, T, d_h]
            return t.reshape(Bn, Tn, n, D_H).transpose(1, 2)

        def repeat_kv(t):  # [B, H_kv, T, d_h] -> [B, H, T, d_h]: query head h reads kv head h // (H / H_kv)
            return t.repeat_interleave(H // H_kv, dim=1)

        q, k, v = linear(h, f"{prefix}.w_q"), linear(h, f"{prefix}.w_k"), linear(h, f"{prefix}.w_v")
        if ssd_conv(CONFIG) > 0:  # ssd: u' = SiLU(conv([q | k | v])), split back
            u = causal_conv1d(torch.cat([q, k, v], dim=-1), p[f"{prefix}.conv.weight"], p[f"{prefix}.conv.bias"])
            q, k, v = torch.split(F.silu(u), [C, H_kv * D_H, H_kv * D_H], dim=-1)
        q, k = heads(q, H), heads(k, H_kv)
        if position(CONFIG) == "rope":  # k per kv head, before a group shares it
            base = float(CONFIG.get("rope_base", 10000))
            q, k = rope(q, base), rope(k, base)
        k, v = repeat_kv(k), repeat_kv(heads(v, H_kv))
        if CONFIG.get("attention") == "linear":
            z = linear_elu1_attention(q, k, v).transpose(1, 2).reshape(Bn, Tn, C)
        elif CONFIG.get("attention") == "ssd":
            dt = F.softplus(linear(h, f"{prefix}.w_dt")).transpose(1, 2)  # Δ [B, H, T], from x, not u'
            z = ssd_attention(q, k, v, dt, p[f"{prefix}.a_log"], p[f"{prefix}.d_skip"])
            z = z.transpose(1, 2).reshape(Bn, Tn, C)
            if ssd_gate(CONFIG):
                z = z * F.silu(linear(h, f"{prefix}.w_g"))
        else:
            s = q @ k.transpose(-2, -1) / math.sqrt(D_H)
            if position(CONFIG) == "alibi":
                s = s + alibi_bias(Tn, H)
            hidden = torch.stack([hidden_keys(Tn, layer, head) for head in range(H)])  # [H, T, T]
            a = torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1)
            z = (a @ v).transpose(1, 2).reshape(Bn, Tn, C)
        return linear(z, f"{prefix}.w_o")

    x = p["tok_emb.weight"][idx_t]
    if position(CONFIG) == "learned":
        x = x + p["pos_emb.weight"][:Tn]
    for i in range(CONFIG["n_layer"]):
        b = f"blocks.{i}"
        x = x + attention(layer_norm(x, f"{b}.ln1"), f"{b}.attn", i)
        hidden = F.gelu(linear(layer_norm(x, f"{b}.ln2"), f"{b}.mlp.fc"), approximate="none" if gelu == "erf" else "tanh")
        x = x + linear(hidden, f"{b}.mlp.proj")
    logits = layer_norm(x, "ln_f") @ p["tok_emb.weight"].t()  # tied head
    loss = F.cross_entropy(logits.reshape(-1, CONFIG["vocab_size"]), targets_t.reshape(-1))
    loss.backward()
    return loss.item(), {name: t.grad.numpy() for name, t in p.items()}


def relative_error(a, b, scale=None):
    """Normwise: max|a - b| / max|b|, or / max|scale| if given."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = np.max(np.abs(b if scale is None else scale))
    return np.max(np.abs(a - b)) / scale


def gradient_error(got, grads, name, config):
    """The relative error of attograd's gradient of `name`. Under softmax the
    key bias gets a gradient of exactly 0 in exact arithmetic (adding q . b_k to
    every score of a row leaves the softmax unchanged), so both sides are
    rounding noise: it is measured against the key weight's gradient instead.
    (Linear attention's phi and ssd's unnormalised weights are not shift-invariant:
    their key bias is compared as is.)"""
    shift_invariant = config.get("attention", "softmax") == "softmax"
    scale = grads[name.replace("w_k.bias", "w_k.weight") if shift_invariant else name]
    return relative_error(got[name], grads[name], scale)


def use_variant(name):
    """Sets CONFIG, B and T for the variant -> its GELU."""
    global CONFIG, B, T
    gelu, CONFIG, B, T = VARIANTS[name]
    return gelu


def metadata_value(v):
    """As attograd reads it: booleans "true" / "false" (not Python's "True")."""
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def model_metadata(gelu):
    return {**{k: metadata_value(v) for k, v in CONFIG.items()}, "gelu": gelu}


def compare(char_lm, variant, seed):
    """Runs char_lm grads on an int64 and an int32 batch (the sparse variant:
    an int64 batch with each --attn-impl), prints a table of relative errors
    -> the worst (error, name)."""
    gelu = use_variant(variant)
    runs = ([("int64 batch", np.int64, "dense"), ("int32 batch", np.int32, "dense")] if variant not in EVERY_IMPL else
            [(impl, np.int64, impl) for impl in ("composed", "dense", "flash")])
    rng = np.random.default_rng(seed)
    weights = random_model(rng, CONFIG)
    idx, targets = random_batch(rng, CONFIG)
    loss, grads = torch_loss_and_grads(weights, idx, targets, gelu)
    errors = {"loss": []} | {name: [] for name in grads}  # one column per run
    with tempfile.TemporaryDirectory(prefix="compare_grads_") as tmp:
        tmp = Path(tmp)
        write_safetensors(tmp / "W.safetensors", weights, model_metadata(gelu))
        for _, batch_dtype, impl in runs:
            batch_path = tmp / f"B_{np.dtype(batch_dtype).name}.safetensors"
            write_safetensors(batch_path, {"idx": idx.astype(batch_dtype), "targets": targets.astype(batch_dtype)})
            out = tmp / "G.safetensors"
            subprocess.run([str(char_lm), "grads", "--weights", str(tmp / "W.safetensors"), "--batch", str(batch_path),
                            "--attn-impl", impl, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
            got, _ = read_safetensors(out)
            missing = sorted(set(grads) - set(got))
            if missing:
                raise SystemExit(f"char_lm grads wrote no gradient for {missing}")
            errors["loss"].append(relative_error(got["loss"], loss))
            for name in grads:
                errors[name].append(gradient_error(got, grads, name, CONFIG))
    print(f"{variant}: torch loss {loss:.17g}; relative error of attograd's")
    print(f"  {'':<28}" + "".join(f" {label:>11}" for label, _, _ in runs))
    for name, row in errors.items():
        flag = "" if max(row) <= TOLERANCE else "  FAIL"
        print(f"  {name:<28}" + "".join(f" {e:>11.3e}" for e in row) + flag)
    return max((max(row), name) for name, row in errors.items())


def write_golden(variant, seed):
    gelu = use_variant(variant)
    rng = np.random.default_rng(seed)
    weights = random_model(rng, CONFIG)
    idx, targets = random_batch(rng, CONFIG)
    loss, grads = torch_loss_and_grads(weights, idx, targets, gelu)
    tensors = {f"weight/{name}": w for name, w in weights.items()}
    tensors.update({"batch/idx": idx, "batch/targets": targets, "loss": np.array(loss, dtype=np.float64)})
    tensors.update({f"grad/{name}": g.astype(np.float64) for name, g in grads.items()})
    metadata = {**model_metadata(gelu), "source": "scripts/compare_grads.py --write-golden", "torch": torch.__version__}
    path = GOLDEN_DIR / f"grads_{variant}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_safetensors(path, tensors, metadata)
    print(f"wrote {path} ({path.stat().st_size} bytes, loss {loss:.17g})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--char-lm", default="./build/char_lm", help="the char_lm binary (default ./build/char_lm)")
    parser.add_argument("--write-golden", action="store_true",
                        help="write tests/golden/grads_<variant>.safetensors, one per variant")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--variants", default="",
                        help="comma-separated variants to compare or write (default: all of them)")
    args = parser.parse_args()
    # the seeds the golden files were written with
    seeds = {"erf": args.seed, "tanh": args.seed + 1, "sparse": args.seed + 2, "gqa": args.seed + 2,
             "linear_elu1": args.seed + 2, "rope": args.seed + 3, "rope_gqa": args.seed + 3, "alibi": args.seed + 3,
             "alibi_sparse": args.seed + 3, "none": args.seed + 3, "ssd": args.seed + 4, "ssd_plain": args.seed + 4,
             "ssd_gqa_conv3": args.seed + 4}
    if args.variants:
        chosen = args.variants.split(",")
        unknown = sorted(set(chosen) - set(seeds))
        if unknown:
            parser.error(f"--variants: no variant {unknown} (known: {', '.join(seeds)})")
        seeds = {variant: seeds[variant] for variant in chosen}
    if args.write_golden:
        for variant, seed in seeds.items():
            write_golden(variant, seed)
        return 0
    if not Path(args.char_lm).is_file():
        parser.error(f"--char-lm {args.char_lm}: no such file (build it: cmake --build build)")
    failed = False
    for variant, seed in seeds.items():
        err, name = compare(args.char_lm, variant, seed)
        ok = err <= TOLERANCE
        failed |= not ok
        print(f"{variant}: max relative error {err:.3e} ({name}) {'OK' if ok else 'FAIL'} (tolerance {TOLERANCE:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
