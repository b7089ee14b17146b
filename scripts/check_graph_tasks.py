"""Checks the lab's graph tasks (examples/lab/graph_tasks.h) against networkx: every
label of every example that build/graph_tasks_dump writes, decoded from its tokens,
against nx.shortest_path_length / nx.has_path on the graph the tokens give. A reference,
not a test dependency (tests/test_graph_tasks.cpp checks the labels against a BFS of its own).

    python3 -m venv /tmp/nx && /tmp/nx/bin/pip install networkx
    /tmp/nx/bin/python scripts/check_graph_tasks.py --dump build/graph_tasks_dump

For each task and node range it runs the dump with a seed, checks each example's
structure (nodes filling the first slots, u and v marked once each, edges between
existing nodes, none twice, no self loop, one scored position, at v) and its label,
and prints the classes' counts. Exits non-zero on the first disagreement.
"""
import argparse
import collections
import json
import subprocess
import sys

import networkx as nx

SETTINGS = [  # task, min nodes, max nodes, max distance, T
    ("connectivity", 8, 16, 3, 64),
    ("shortest-path", 8, 16, 3, 64),
    ("connectivity", 12, 16, 5, 64),  # the graphs preset's
    ("shortest-path", 12, 16, 5, 64),
    ("connectivity", 16, 32, 7, 128),
    ("shortest-path", 16, 32, 7, 128),
]


def check(dump, task, min_nodes, nodes, max_distance, T, examples, seed):
    out = subprocess.run(
        [dump, "--task", task, "--min-nodes", str(min_nodes), "--nodes", str(nodes), "--max-distance",
         str(max_distance), "--block-size", str(T), "--examples", str(examples), "--seed", str(seed)],
        check=True, capture_output=True, text=True).stdout.splitlines()
    layout = json.loads(out[0])
    node, source, target = layout["node"], layout["source"], layout["target"]
    classes = collections.Counter()
    sizes = collections.Counter()
    for line_number, line in enumerate(out[1:], start=2):
        e = json.loads(line)
        x, y = e["x"], e["y"]
        where = f"{task} N<={nodes} example line {line_number}"
        g = nx.Graph()
        u = v = None
        for slot in range(nodes):
            t = x[slot]
            if t == layout["pad"]:
                continue
            assert slot == g.number_of_nodes(), f"{where}: node slot {slot} after a gap"
            g.add_node(slot)
            if source <= t < target:
                assert u is None and t - source == slot, f"{where}: u marked twice or at the wrong slot"
                u = slot
            elif target <= t < target + 32:
                assert v is None and t - target == slot, f"{where}: v marked twice or at the wrong slot"
                v = slot
            else:
                assert t - node == slot, f"{where}: slot {slot} holds token {t}"
        assert u is not None and v is not None and u != v, f"{where}: u {u}, v {v}"
        n = g.number_of_nodes()
        assert min_nodes <= n <= nodes, f"{where}: {n} nodes"
        sizes[n] += 1
        at = nodes
        while at + 1 < T and x[at] != layout["pad"]:
            a, b = x[at] - node, x[at + 1] - node
            assert 0 <= a < n and 0 <= b < n and a != b, f"{where}: edge {a}-{b}"
            assert not g.has_edge(a, b), f"{where}: edge {a}-{b} twice"
            g.add_edge(a, b)
            at += 2
        assert all(t == layout["pad"] for t in x[at:]), f"{where}: tokens after the edge list"
        if task == "connectivity":
            expected = layout["connected"] if nx.has_path(g, u, v) else layout["unreachable"]
        else:
            expected = (layout["distance"] + nx.shortest_path_length(g, u, v)) if nx.has_path(g, u, v) \
                else layout["unreachable"]
        scored = [t for t in range(T) if y[t] != -100]
        assert scored == [v], f"{where}: scored positions {scored}, v = {v}"
        assert y[v] == expected, f"{where}: label {y[v]}, networkx says {expected}"
        name = "unreachable" if expected == layout["unreachable"] else \
            "connected" if expected == layout["connected"] else f"distance {expected - layout['distance']}"
        classes[name] += 1
    return classes, sizes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", default="build/graph_tasks_dump")
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    print(f"networkx {nx.__version__}")
    for task, min_nodes, nodes, max_distance, T in SETTINGS:
        try:
            classes, sizes = check(args.dump, task, min_nodes, nodes, max_distance, T, args.examples, args.seed)
        except AssertionError as e:
            print(f"FAILED: {e}")
            return 1
        counts = ", ".join(f"{k} {classes[k]}" for k in sorted(classes))
        print(f"{task} nodes {min_nodes}-{nodes}, D {max_distance}, T {T}: {args.examples} examples agree with networkx "
              f"(node counts {min(sizes)}-{max(sizes)}); classes: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
