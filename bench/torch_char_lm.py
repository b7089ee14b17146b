#!/usr/bin/python3
"""PyTorch reference of attograd's char_lm model and training loop, for speed
comparisons (bench/compare_cpu.sh) and as a second implementation to check
against. Same model: pre-LN GPT, biases on, Linear weights stored [in, out]
(y = x @ W + b), head tied to the token embedding, exact-erf GELU (or tanh),
AdamW (decay on >= 2-D params), warmup + cosine, grad clipping.

    /usr/bin/python3 bench/torch_char_lm.py --iters 200 --torch-threads 1
Prints one line per 50 iterations and a final "ms/iter" line, then
"flops/step" by nanoGPT's count (6N + 12·L·H·Q·T per token, N without the
position embedding, as nanoGPT's estimate_mfu) and the TFLOP/s it gives.

--precision fp32 (TF32 off), tf32 (TF32 matmuls) or bf16 (autocast to bfloat16
around the forward and the loss, float32 weights and AdamW, as nanoGPT and
attograd's --precision bf16); --compile wraps the model in torch.compile where
this PyTorch has it (its compilation runs in the warm-up iterations).
Set OPENBLAS_NUM_THREADS / OMP_NUM_THREADS in the environment as well:
torch.set_num_threads does not govern OpenBLAS.
"""
import argparse
import contextlib
import math
import time

import torch
import torch.nn.functional as F


class Linear(torch.nn.Module):
    def __init__(self, n_in, n_out, std):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_in, n_out) * std)
        self.bias = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Block(torch.nn.Module):
    def __init__(self, C, H, n_layer, gelu, dropout):
        super().__init__()
        proj_std = 0.02 / math.sqrt(2 * n_layer)
        self.H, self.gelu, self.dropout = H, gelu, dropout
        self.ln1 = torch.nn.LayerNorm(C)
        self.w_q, self.w_k, self.w_v = (Linear(C, C, 0.02) for _ in range(3))
        self.w_o = Linear(C, C, proj_std)
        self.ln2 = torch.nn.LayerNorm(C)
        self.fc = Linear(C, 4 * C, 0.02)
        self.proj = Linear(4 * C, C, proj_std)

    def attn(self, x):
        B, T, C = x.shape
        split = lambda t: t.view(B, T, self.H, C // self.H).transpose(1, 2)
        q, k, v = split(self.w_q(x)), split(self.w_k(x)), split(self.w_v(x))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        a = F.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        z = (a @ v).transpose(1, 2).reshape(B, T, C)
        return F.dropout(self.w_o(z), self.dropout, self.training)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        mlp = self.proj(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))
        return x + F.dropout(mlp, self.dropout, self.training)


class GPT(torch.nn.Module):
    def __init__(self, V, T, n_layer, H, C, gelu, dropout):
        super().__init__()
        self.tok_emb = torch.nn.Parameter(torch.randn(V, C) * 0.02)
        self.pos_emb = torch.nn.Parameter(torch.randn(T, C) * 0.02)
        self.dropout = dropout
        self.blocks = torch.nn.ModuleList(Block(C, H, n_layer, gelu, dropout) for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = F.dropout(self.tok_emb[idx] + self.pos_emb[:T], self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tok_emb.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="../shared/data/tinyshakespeare.txt")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--gelu", default="none", choices=["none", "tanh"])
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model (if this PyTorch has it)")
    p.add_argument("--warmup", type=int, default=10, help="iterations left out of the median")
    p.add_argument("--profile", type=int, default=0,
                   help="after the timed iterations, N more under torch.profiler: a table of the kernels' GPU time")
    a = p.parse_args()
    torch.set_num_threads(a.torch_threads)
    torch.manual_seed(a.seed)

    text = open(a.data).read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text[:200000]], dtype=torch.long)
    model = GPT(len(chars), a.block_size, a.n_layer, a.n_head, a.n_embd, a.gelu, a.dropout).to(a.device)
    # TF32 only where asked: PyTorch's own default for matmuls is off since 1.12, cuDNN's on.
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    def autocast():  # a fresh context each step
        if a.precision == "bf16":
            return torch.autocast(device_type=a.device, dtype=torch.bfloat16)
        return contextlib.nullcontext()
    # nanoGPT's count: N without the position embedding (the tied token embedding counts once).
    n_params = sum(p.numel() for p in model.parameters()) - model.pos_emb.numel()
    Q = a.n_embd // a.n_head
    flops_per_token = 6 * n_params + 12 * a.n_layer * a.n_head * Q * a.block_size
    flops_per_step = flops_per_token * a.block_size * a.batch_size
    run = model
    if a.compile:
        if hasattr(torch, "compile"):
            run = torch.compile(model)
        else:
            print("torch.compile: not in this PyTorch " + torch.__version__ + "; eager")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))

    def step(it):
        ix = torch.randint(len(data) - a.block_size - 1, (a.batch_size,))
        x = torch.stack([data[i:i + a.block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.block_size] for i in ix])
        lr = 1e-3 * (it + 1) / 101 if it < 100 else 1e-4 + 0.5 * (1 + math.cos(math.pi * (it - 100) / 1900)) * 9e-4
        for g in opt.param_groups:
            g["lr"] = lr
        with autocast():
            loss = run(x.to(a.device), y.to(a.device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()  # waits for the GPU, as attograd's loop does

    times = []
    for it in range(a.iters):
        t0 = time.perf_counter()
        loss_value = step(it)
        times.append(time.perf_counter() - t0)
        if it % 50 == 0:
            print(f"iter {it} loss {loss_value:.4f}")
    steady = sorted(times[a.warmup:])
    median_ms = 1000 * steady[len(steady) // 2]
    print(f"ms/iter {median_ms:.2f} (median of iters {a.warmup}..{a.iters - 1})")
    print(f"flops/step {flops_per_step} ({flops_per_step / median_ms / 1e9:.2f} TFLOP/s by nanoGPT's count, "
          f"precision {a.precision}{', compiled' if run is not model else ''})")
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for it in range(a.iters, a.iters + a.profile):
                step(it)
        events = prof.key_averages()
        # PyTorch 2.4 renamed cuda_time_total to device_time_total; 1.13 knows only the first.
        for sort_by in (["device_time_total", "cuda_time_total"] if a.device == "cuda" else ["cpu_time_total"]):
            try:
                print(events.table(sort_by=sort_by, row_limit=30, max_name_column_width=60))
                break
            except AttributeError:
                continue


if __name__ == "__main__":
    main()
