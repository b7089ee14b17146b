#!/usr/bin/env python3
"""Would the tests notice a wrong gradient? A mutation campaign over the backward code.

    python3 scripts/mutate_gradients.py                  # 100 mutants, seed 1 (about an hour on 2 cores)
    python3 scripts/mutate_gradients.py --sample 20      # a quick look
    python3 scripts/mutate_gradients.py --list           # how many mutants there are, per file
    python3 scripts/mutate_gradients.py --scope forward  # the same files' other code: the forward

The code it mutates is what computes gradients on the CPU: every closure an op
hands to record() in core/ops/*.cpp, and every function of core/cpu/*.cpp and of
core/*_math.h whose name says backward, derivative, _grad, gradient or dgelu.
With --scope forward, every other line of code of the same files instead (not
the preprocessor's): the forward kernels, and the ops' checks and dispatch;
its mutants and results are kept apart (mutants-forward/, results-forward.csv).
Each line there is mutated by universalmutator (Groce et al.; PyPI, installed in
the campaign's own venv, never a dependency of the build or the tests): an
operator or constant replaced, a statement deleted, a condition negated, ... A
fixed-seed sample of the mutants is then run, one at a time, in a copy of the
sources (a git worktree of HEAD under the campaign's folder, so the checkout is
never touched): the mutated file is put in place, the build (Release, no unity
batches, so one file recompiles; CUDA off: without a device its cases skip) is brought up to date and
the suite runs as CI runs it (`ctest -j2`, stopping at the first failure),
without the entries that test no gradient (the installed package, the README's
flow, file sizes, the two pages in Chromium) and the cuda: ones (skipped here).
Outcomes:
  killed          a test failed (its name is kept)
  killed-crash    a test crashed (a signal, an abort)
  killed-timeout  a test ran past 300 s
  survived        every test passed: either the mutant computes the same
                  gradient (an equivalent mutant) or the tests have a gap;
                  each is for a person to read
  no-compile      the mutant is not C++ (not counted in the score)
Each survivor is then run again in an ASan + UBSan build (clang, as CI's second
suite; --no-sanitizers skips it): a loop one step too far may pass the plain
suite and be caught there, and counts as killed-by-sanitizers.
The worktree is registered with git (`git worktree list`); after deleting the
folder, `git worktree prune` forgets it.
Results go to FOLDER/results.csv, one row per mutant, as they finish; a second
run with the same arguments resumes (one campaign per folder at a time), and a
larger --sample runs the same mutants first, then more. The score printed at the end is
killed / (killed + survived), over the mutants that compiled.
"""
import argparse
import collections
import csv
import os
import random
import re
import shutil
import subprocess
import sys
import signal
import time
import venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = "universalmutator==1.14.1"
# What tests no gradient: the installed package, the README's flow, sizes, the pages; the cuda: cases skip here.
NOT_RUN = "^(install|readme|sizes|report|lab report|cuda): "
NAMES = re.compile(r"\b\w*(backward|derivative|_grad|gradient|dgelu)\w*\s*\(")
# Lines with nothing to mutate.
TRIVIAL = ("", "{", "}", "(", ")", ";", "});", "};")


def blank_comments_and_strings(src):
    """src with comments and string/char literals blanked out, offsets and newlines kept."""
    out, i, n = list(src), 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i) + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif src[i] in "\"'" and not (src[i] == "'" and i > 0 and src[i - 1].isalnum()):  # 1'000 is a digit separator
            j = i + 1
            while j < n and src[j] != src[i]:
                j += 2 if src[j] == "\\" else 1
            out[i + 1:j] = " " * (j - i - 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def matching(s, i, open_, close):
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_:
            depth += 1
        elif s[j] == close:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced " + open_ + close)


def gradient_lines(path):
    """The 1-based lines of path that compute gradients (see the docstring), code only."""
    src = open(path, encoding="utf-8").read()
    s = blank_comments_and_strings(src)

    def line_of(offset):
        return s.count("\n", 0, offset) + 1

    lines = set()
    if "/ops/" in path:
        for m in re.finditer(r"\brecord\s*\(", s):
            end = matching(s, m.end() - 1, "(", ")")
            closure = s.find("[", m.end(), end)  # the closure's capture list, after the op's name and tensors
            if closure >= 0:
                lines.update(range(line_of(closure), line_of(end) + 1))
    else:
        for m in NAMES.finditer(s):
            k = matching(s, m.end() - 1, "(", ")") + 1
            while k < len(s) and (s[k] in " \t\n" or s.startswith("const", k) or s.startswith("noexcept", k)):
                k += 5 if s.startswith("const", k) else 8 if s.startswith("noexcept", k) else 1
            if k < len(s) and s[k] == "{":  # a definition, not a call or a declaration
                lines.update(range(line_of(k), line_of(matching(s, k, "{", "}")) + 1))
    code = s.split("\n")
    return sorted(l for l in lines if code[l - 1].strip() not in TRIVIAL)


def forward_lines(path):
    """The 1-based lines of code of path that gradient_lines leaves out, the preprocessor's too."""
    code = blank_comments_and_strings(open(path, encoding="utf-8").read()).split("\n")
    gradient = set(gradient_lines(path))
    return [l for l, text in enumerate(code, 1)
            if l not in gradient and text.strip() not in TRIVIAL and not text.lstrip().startswith("#")]


def sources(root):
    found = []
    for folder, pattern in (("core/ops", r"\.cpp$"), ("core/cpu", r"\.cpp$"), ("core", r"_math\.h$")):
        for name in sorted(os.listdir(os.path.join(root, folder))):
            if re.search(pattern, name):
                found.append(f"{folder}/{name}")
    return found


def changed_line(original, mutant):
    for i, (a, b) in enumerate(zip(original, mutant)):
        if a != b:
            return i + 1
    return min(len(original), len(mutant)) + 1


def generate(tool, root, rel, lines, into):
    """universalmutator's mutants of rel's given lines, as whole files in into/."""
    os.makedirs(into, exist_ok=True)
    lines_file = into + ".lines"
    with open(lines_file, "w") as f:
        f.write("".join(f"{l}\n" for l in lines))
    src = os.path.join(root, rel)
    subprocess.run([tool, src, "cpp", "--noCheck", "--lines", lines_file, "--mutantDir", into],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.listdir(into):
        return
    # The tool's line filter loses some files (core/s4_math.h: its scan stops early). Mutate each
    # contiguous run of the lines as a fragment instead, and put it back in the whole file.
    original = open(src, encoding="utf-8").read().split("\n")
    runs, start = [], None
    for i, l in enumerate(lines):
        if start is None:
            start = l
        if i + 1 == len(lines) or lines[i + 1] > l + 2:  # a blank line or a lone brace does not split a run
            runs.append((start, l))
            start = None
    scratch = into + ".fragment"
    wanted = set(lines)
    for first, last in runs:
        shutil.rmtree(scratch, ignore_errors=True)
        os.makedirs(scratch)
        fragment = os.path.join(scratch, "fragment.cpp")
        with open(fragment, "w", encoding="utf-8") as f:
            f.write("\n".join(original[first - 1:last]) + "\n")
        subprocess.run([tool, fragment, "cpp", "--noCheck", "--mutantDir", scratch],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name in sorted(os.listdir(scratch)):
            if name == "fragment.cpp":
                continue
            body = open(os.path.join(scratch, name), encoding="utf-8").read().rstrip("\n").split("\n")
            whole = original[:first - 1] + body + original[last:]
            if changed_line(original, whole) in wanted:
                with open(os.path.join(into, f"{os.path.basename(rel)}.lines{first}.{name}"), "w", encoding="utf-8") as f:
                    f.write("\n".join(whole))
    shutil.rmtree(scratch)


def try_mutant(src, rel, mutant, build_cmd, test_cmd, env):
    """Puts mutant in place of src/rel, builds, runs the tests, takes it out: (line, before, after, outcome, failed, build_s, test_s)."""
    target = os.path.join(src, rel)
    original = open(target, encoding="utf-8").read()
    mutated = open(mutant, encoding="utf-8").read()
    lines, changed = original.split("\n"), mutated.split("\n")
    line = changed_line(lines, changed)
    before = lines[line - 1].strip() if line <= len(lines) else ""
    after = changed[line - 1].strip() if line <= len(changed) else ""
    with open(target, "w", encoding="utf-8") as f:
        f.write(mutated)
    try:
        t0 = time.time()
        built = subprocess.run(build_cmd, capture_output=True, text=True)
        build_s, test_s, failed = time.time() - t0, 0.0, ""
        if built.returncode != 0:
            return line, before, after, "no-compile", "", build_s, test_s
        t0 = time.time()
        run = subprocess.run(test_cmd, env=env, capture_output=True, text=True)
        test_s = time.time() - t0
        if run.returncode == 0:
            return line, before, after, "survived", "", build_s, test_s
        summary = run.stdout[run.stdout.find("The following tests FAILED"):]
        bad = re.findall(r"^\s*\d+ - (.*) \(([^()]*)\)\s*$", summary, re.M)  # ctest's list of the failed
        kinds = {kind for _, kind in bad}
        outcome = ("killed-timeout" if "Timeout" in kinds else
                   "killed" if kinds <= {"Failed"} else "killed-crash")  # SEGFAULT, Subprocess aborted, ...
        failed = "; ".join(f"{test} ({kind})" for test, kind in bad[:3])
        return line, before, after, outcome, failed, build_s, test_s
    finally:
        with open(target, "w", encoding="utf-8") as f:
            f.write(original)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default=os.path.join(ROOT, "build-mutants"),
                        help="the campaign's folder: venv, worktree, build, mutants, results.csv")
    parser.add_argument("--sample", type=int, default=100, help="how many mutants to run")
    parser.add_argument("--seed", type=int, default=1, help="the sample's seed")
    parser.add_argument("--list", action="store_true", help="count the mutants per file and stop")
    parser.add_argument("--scope", choices=("backward", "forward"), default="backward",
                        help="mutate the gradient code (the default) or the rest of the same files")
    parser.add_argument("--no-sanitizers", dest="sanitizers", action="store_false",
                        help="do not run the survivors again under ASan and UBSan")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("mutate_gradients: stopped"))  # so the mutant is taken out
    folder = os.path.abspath(args.folder)
    os.makedirs(folder, exist_ok=True)

    tool = os.path.join(folder, "venv", "bin", "mutate")
    if not os.path.exists(tool):
        venv.create(os.path.join(folder, "venv"), with_pip=True)
        subprocess.run([os.path.join(folder, "venv", "bin", "pip"), "install", "-q", TOOL], check=True)

    # The sources as committed (HEAD), in a worktree of their own: the checkout is never touched.
    src = os.path.join(folder, "src")
    build = os.path.join(folder, "build")
    if not os.path.isdir(src):
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", src, "HEAD"], check=True)
    subprocess.run(["git", "-C", src, "checkout", "--", "."], check=True)  # a mutant an interrupted run left
    forward = args.scope == "forward"
    mutants_dir = os.path.join(folder, "mutants-forward" if forward else "mutants")
    if not os.path.isdir(mutants_dir):
        for rel in sources(src):
            lines = (forward_lines if forward else gradient_lines)(os.path.join(src, rel))
            if lines:
                generate(tool, src, rel, lines, os.path.join(mutants_dir, rel.replace("/", "__")))
    everything = []
    for d in sorted(os.listdir(mutants_dir)):
        path = os.path.join(mutants_dir, d)
        if os.path.isdir(path):
            everything += [(d.replace("__", "/"), os.path.join(path, m)) for m in sorted(os.listdir(path))]
    per_file = collections.Counter(rel for rel, _ in everything)
    if args.list:
        for rel, n in sorted(per_file.items()):
            print(f"{n:6d}  {rel}")
        print(f"{len(everything):6d}  in all")
        return 0
    order = list(everything)
    random.Random(args.seed).shuffle(order)
    sample = order[:args.sample]  # a larger --sample later runs these first, then more

    if not os.path.isdir(build):
        subprocess.run(["cmake", "-G", "Ninja", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                        "-DATTOGRAD_UNITY=OFF", "-DATTOGRAD_WITH_CUDA=OFF"], check=True, stdout=subprocess.DEVNULL)
    data = subprocess.run(["bash", os.path.join(ROOT, "scripts", "get_data.sh")], check=True,
                          capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, ATTOGRAD_DATA=data)
    build_cmd = ["ninja", "-C", build, "-j2"]
    test_cmd = ["ctest", "--test-dir", build, "-j2", "--stop-on-failure", "--timeout", "300", "-E", NOT_RUN]
    print(f"{len(everything)} mutants of {len(per_file)} files; running {len(sample)} (seed {args.seed})")
    subprocess.run(build_cmd, check=True, stdout=subprocess.DEVNULL)
    if subprocess.run(test_cmd, env=env, capture_output=True).returncode != 0:
        sys.exit("mutate_gradients: the unmutated suite fails; nothing to compare against")

    results = os.path.join(folder, "results-forward.csv" if forward else "results.csv")
    # A mutant is its file and its name: core/cpu/softmax.cpp and core/ops/softmax.cpp both have softmax.mutant.36.cpp.
    done = set()
    if os.path.exists(results):
        done = {(row["file"], row["mutant"]) for row in csv.DictReader(open(results))}
    out = open(results, "a", newline="")
    writer = csv.writer(out)
    if not done:
        writer.writerow(["file", "mutant", "line", "original", "mutated", "outcome", "failed", "build_s", "test_s",
                         "under_sanitizers"])
    for rel, mutant in sample:
        name = os.path.basename(mutant)
        if (rel, name) in done:
            continue
        line, before, after, outcome, failed, build_s, test_s = try_mutant(src, rel, mutant, build_cmd, test_cmd, env)
        writer.writerow([rel, name, line, before, after, outcome, failed, round(build_s, 1), round(test_s, 1), ""])
        out.flush()
        print(f"{outcome:15s} {rel}:{line}  {before[:60]!r} -> {after[:60]!r}", flush=True)
    out.close()
    subprocess.run(build_cmd, stdout=subprocess.DEVNULL)  # the unmutated build again

    # CI runs the suite a second time under ASan and UBSan: a survivor that writes out of
    # bounds (a loop one step too far) is caught there. Each survivor again, in that build.
    rows = list(csv.DictReader(open(results)))
    in_sample = {(rel, os.path.basename(m)): m for rel, m in sample}
    pending = [row for row in rows if row["outcome"] == "survived" and not row["under_sanitizers"]
               and (row["file"], row["mutant"]) in in_sample]
    if pending and args.sanitizers:
        sbuild = os.path.join(folder, "build-sanitize")
        if not os.path.isdir(sbuild):
            subprocess.run(["cmake", "-G", "Ninja", "-S", src, "-B", sbuild, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                            "-DATTOGRAD_UNITY=OFF", "-DATTOGRAD_SANITIZE=address,undefined"],
                           check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, CC="clang", CXX="clang++"))
        sbuild_cmd = ["ninja", "-C", sbuild, "-j2"]
        stest_cmd = [c if c != build else sbuild for c in test_cmd]
        stest_cmd[stest_cmd.index("300")] = "900"
        senv = dict(env, UBSAN_OPTIONS="print_stacktrace=1")
        subprocess.run(sbuild_cmd, check=True, stdout=subprocess.DEVNULL)
        for row in pending:
            mutant = in_sample[(row["file"], row["mutant"])]
            *_, outcome, failed, _, _ = try_mutant(src, row["file"], mutant, sbuild_cmd, stest_cmd, senv)
            row["under_sanitizers"] = outcome + (f": {failed}" if failed else "")
            print(f"sanitizers: {outcome:15s} {row['file']}:{row['line']}", flush=True)
            with open(results, "w", newline="") as f:  # the whole table again, this row's verdict in it
                table = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                table.writeheader()
                table.writerows(rows)
        subprocess.run(sbuild_cmd, stdout=subprocess.DEVNULL)

    for row in rows:  # a survivor the sanitizers catch counts as killed, as in CI
        if row["outcome"] == "survived" and row["under_sanitizers"].startswith("killed"):
            row["outcome"] = "killed-by-sanitizers"
    counts = collections.Counter(row["outcome"] for row in rows)
    killed = sum(n for outcome, n in counts.items() if outcome.startswith("killed"))
    compiled = killed + counts["survived"]
    print(", ".join(f"{outcome} {n}" for outcome, n in sorted(counts.items())))
    if compiled:
        print(f"score: {killed} of {compiled} compiled mutants killed ({100.0 * killed / compiled:.1f} %)")
    for row in rows:
        if row["outcome"] == "survived":
            print(f"survived: {row['file']}:{row['line']}  {row['original']!r} -> {row['mutated']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
