#!/usr/bin/python3
"""Golden numbers for tests/test_optim.cpp from PyTorch's own optimizers.

Runs 5 steps of torch.optim.AdamW (two parameter groups: weight decay 0.1 and 0),
torch.optim.Adam (L2 weight decay) and torch.optim.SGD (momentum + Nesterov +
weight decay, and momentum + dampening) on small float64 parameters, and writes
the initial values, the gradient fed at each step and the parameters after each
step to tests/golden/optim.json. Values come from closed-form formulas, so
nothing depends on an RNG. The test never imports torch; regenerate with

    /usr/bin/python3 scripts/make_golden_optim.py
"""
import json
import math
import os
import re

import torch

STEPS = 5

# name -> shape. A matrix (decayed by AdamW) and a vector (not decayed).
SHAPES = {"blocks.0.mlp.fc.weight": [2, 3], "blocks.0.mlp.fc.bias": [3]}


def initial(k, n):
    # Magnitudes in [0.5, 1.5] with alternating signs: away from zero, so the
    # test can compare relative errors.
    return [(1.0 + 0.5 * math.sin(1.7 * i + k)) * (-1) ** i for i in range(n)]


def grad(k, n, step):
    # Varying sign and scale from step to step, so m and v do real work.
    return [math.cos(0.9 * i + 1.3 * step + k) * (1.0 + 0.25 * step) for i in range(n)]


def run(make_optimizer, group_of):
    """group_of: parameter name -> index of its group in make_optimizer's groups."""
    params = {}
    for k, (name, shape) in enumerate(SHAPES.items()):
        n = math.prod(shape)
        params[name] = torch.tensor(initial(k, n), dtype=torch.float64).reshape(shape).requires_grad_()
    groups = {}
    for name, index in group_of.items():
        groups.setdefault(index, []).append(params[name])
    opt = make_optimizer([groups[i] for i in sorted(groups)])
    record = {name: {"shape": SHAPES[name], "group": group_of[name],
                     "initial": params[name].detach().flatten().tolist(), "grads": [], "after": []}
              for name in SHAPES}
    for step in range(STEPS):
        for k, (name, p) in enumerate(params.items()):
            g = grad(k, p.numel(), step)
            p.grad = torch.tensor(g, dtype=torch.float64).reshape(p.shape)
            record[name]["grads"].append(g)
        opt.step()
        for name, p in params.items():
            record[name]["after"].append(p.detach().flatten().tolist())
    return [dict(name=name, **r) for name, r in record.items()]


def main():
    both_groups = {"blocks.0.mlp.fc.weight": 0, "blocks.0.mlp.fc.bias": 1}
    one_group = {name: 0 for name in SHAPES}
    cases = {}

    adamw = dict(lr=0.01, betas=(0.9, 0.95), eps=1e-8)
    decays = [0.1, 0.0]
    cases["adamw"] = dict(
        hyper=dict(adamw, betas=list(adamw["betas"]), group_weight_decay=decays),
        params=run(lambda gs: torch.optim.AdamW(
            [dict(params=g, weight_decay=wd) for g, wd in zip(gs, decays)], **adamw), both_groups))

    adam = dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)
    cases["adam"] = dict(hyper=dict(adam, betas=list(adam["betas"])),
                         params=run(lambda gs: torch.optim.Adam(gs[0], **adam), one_group))

    nesterov = dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=True)
    cases["sgd_nesterov"] = dict(hyper=nesterov,
                                 params=run(lambda gs: torch.optim.SGD(gs[0], **nesterov), one_group))

    dampened = dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.02, nesterov=False)
    cases["sgd_dampening"] = dict(hyper=dampened,
                                  params=run(lambda gs: torch.optim.SGD(gs[0], **dampened), one_group))

    out = dict(generator="scripts/make_golden_optim.py", torch=torch.__version__, steps=STEPS, cases=cases)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "optim.json")
    text = json.dumps(out, indent=1)
    # One line per list of numbers: short, and a diff shows which step changed.
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    with open(path, "w") as f:
        f.write(text + "\n")
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
