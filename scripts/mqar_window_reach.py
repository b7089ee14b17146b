#!/usr/bin/env python3
"""The ceiling a sliding window puts on MQAR: the fraction of queries whose key lies within reach.

A query at position q of a softmax:window=W model sees positions q - (W - 1) ... q in one layer
(attograd's window: p - j < W), so L layers reach back (W - 1) * L positions: 30 for two layers
of 16. Answering key i (at position 2i, its value at 2i + 1) needs key and value both within
that reach of the query, through one position between them at most W - 1 back: q - 2i <= 30.
The queries farther back cannot be answered however the model is trained, so the fraction
within reach is the ceiling of the window's accuracy.

The queries follow the lab's generator (examples/lab/tasks.cpp, Zoology's _mqar): P pairs at
0 ... 2P - 1, key i queried at q = 2P + 2 g_i, the gaps g_i drawn one after another without
replacement from [0, (T - 2P) / 2) with p(g) proportional to (g + 1)^(a - 1), a = 0.01. This
computes the fraction exactly, summing over the order in which the gaps are drawn (exact for
small P), or by sampling many examples where that sum is too large.

  python3 scripts/mqar_window_reach.py [--window 16] [--layers 2] [--power-a 0.01] T:P ...
"""
import argparse
import random


def weights(space, a):
    return [(g + 1) ** (a - 1) for g in range(space)]


def exact(T, P, reach, a):
    """E[fraction of the P queries within reach], summing over every sequence of drawn gaps."""
    space = (T - 2 * P) // 2
    w = weights(space, a)

    def walk(i, left, total):
        # Key i's gap drawn from the gaps `left`, weights summing to `total`: the expected number of
        # keys i, i + 1, ... whose query lies within reach of the key.
        if i == P:
            return 0.0
        expected = 0.0
        for g in left:
            p = w[g] / total
            within = 1.0 if (2 * P + 2 * g) - 2 * i <= reach else 0.0
            expected += p * (within + walk(i + 1, left - {g}, total - w[g]))
        return expected

    return walk(0, frozenset(range(space)), sum(w)) / P


def sampled(T, P, reach, a, examples, seed):
    space = (T - 2 * P) // 2
    rng = random.Random(seed)
    base = weights(space, a)
    within = 0
    for _ in range(examples):
        w = list(base)
        for i in range(P):
            g = rng.choices(range(space), weights=w)[0]
            w[g] = 0.0
            within += (2 * P + 2 * g) - 2 * i <= reach
    return within / (examples * P)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", nargs="+", help="T:P, e.g. 64:4 128:8")
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--power-a", type=float, default=0.01)
    parser.add_argument("--examples", type=int, default=20000, help="examples sampled where P > 4")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    reach = (args.window - 1) * args.layers
    print(f"window {args.window}, {args.layers} layers: reach {reach} positions back, a = {args.power_a}")
    for cell in args.cells:
        T, P = (int(v) for v in cell.split(":"))
        if P <= 4:
            fraction, how = exact(T, P, reach, args.power_a), "exact"
        else:
            fraction, how = sampled(T, P, reach, args.power_a, args.examples, args.seed), f"{args.examples} examples"
        print(f"T = {T}, P = {P}: {fraction:.4f} of the queries within reach ({how})")


if __name__ == "__main__":
    main()
