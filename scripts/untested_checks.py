#!/usr/bin/env python3
"""Which refusals has no test made? The AG_CHECKs the suite never fires, and the parts of compound ones it never fails.

    python3 scripts/untested_checks.py                    # build, run the suite, report (about 10 minutes on 2 cores)
    python3 scripts/untested_checks.py --report-only      # the report again from the last run's profile
    python3 scripts/untested_checks.py --only 'core/ops/'  # only files whose path matches

A check `AG_CHECK(a && b && c, message)` guards user input. A test that gives `a` wrong
fires it, but a check that lost `&& b` would pass every test that never gives `b` wrong
with `a` right: the input would go through. This script builds the library, the tests and
the programs they start with clang's source-based coverage (-fprofile-instr-generate
-fcoverage-mapping, Debug at -O1, no CUDA; in FOLDER, build-coverage/ by default), runs the
suite as CI does (`ctest -j2`, without the installed package, the README's flow and the
pages in Chromium, which test no refusal of the library's), and reads each AG_CHECK and
AG_CHECK_OPTIONS from `llvm-cov export`: clang counts, for each condition of a && or ||
inside the macro, how often it was true and how often false. It lists
  NEVER   a check of one condition that no test fired (its failing side never ran), and
  PARTS   a compound check with a condition that never took one of its sides: for a
          chain of &&, a part no test made false (the others true); for ||, one no test made true,
with the counts. Some are internal invariants no caller can reach (a kernel's check of what
its op checked already; a device mismatch, which needs a GPU): those are for a person to
read, as mutation survivors are (docs/reliability.md, "Refusals no test made").
The conditions are named by splitting the check's text at && and ||; where a condition holds
a lambda or a ternary the split is off and the part is given by its number.
"""
import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_RUN = "^(install|readme|report|lab report|cuda): "
FLAGS = "-O1 -fprofile-instr-generate -fcoverage-mapping"


def tool(name):
    for candidate in (name + "-14", name):
        if shutil.which(candidate):
            return candidate
    sys.exit(f"untested_checks: {name} not found (apt-get install llvm-14)")


def build_and_run(folder):
    build = os.path.join(folder, "build")
    subprocess.run(["bash", "scripts/deps.sh", "clang", "libclang-rt-14-dev", "llvm-14"], cwd=ROOT, check=True)
    env = dict(os.environ, CC="clang", CXX="clang++")
    generator = [] if os.path.exists(os.path.join(build, "CMakeCache.txt")) else ["-G", "Ninja"]
    subprocess.run(["cmake", *generator, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Debug", "-DATTOGRAD_UNITY=ON",
                    "-DATTOGRAD_WITH_CUDA=OFF", f"-DCMAKE_CXX_FLAGS={FLAGS}", f"-DCMAKE_C_FLAGS={FLAGS}",
                    "-DCMAKE_EXE_LINKER_FLAGS=-fprofile-instr-generate"], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", "attograd_tests"], check=True)
    profiles = os.path.join(folder, "profiles")
    shutil.rmtree(profiles, ignore_errors=True)
    os.makedirs(profiles)
    # %4m: four files per binary, merged as the processes write them (the suite starts hundreds).
    run_env = dict(os.environ, LLVM_PROFILE_FILE=os.path.join(profiles, "%4m.profraw"))
    suite = subprocess.run(["ctest", "-j2", "--timeout", "1800", "-E", NOT_RUN], cwd=build, env=run_env)
    if suite.returncode:
        print("untested_checks: the suite failed in the coverage build; the report counts what ran", file=sys.stderr)
    raw = glob.glob(os.path.join(profiles, "*.profraw"))
    subprocess.run([tool("llvm-profdata"), "merge", "-sparse", *raw, "-o", os.path.join(folder, "suite.profdata")],
                   check=True)
    binaries = [os.path.join(build, name) for name in sorted(os.listdir(build))
                if os.path.isfile(os.path.join(build, name)) and os.access(os.path.join(build, name), os.X_OK)
                and not name.endswith((".sh", ".so"))]
    objects = [arg for b in binaries for arg in ("-object", b)][1:]  # the first is llvm-cov's positional binary
    with open(os.path.join(folder, "export.json"), "w") as out:
        subprocess.run([tool("llvm-cov"), "export", f"-instr-profile={os.path.join(folder, 'suite.profdata')}",
                        *objects, "-skip-functions"], stdout=out, stderr=subprocess.DEVNULL, check=True)


class Sources:
    def __init__(self):
        self.text = {}

    def offset(self, path, line, col):
        """The text and the offset in it of llvm-cov's line and column (1-based, the column in bytes)."""
        if path not in self.text:
            s = open(path, encoding="utf-8").read()
            starts = [0] + [i + 1 for i, c in enumerate(s) if c == "\n"]
            self.text[path] = (s, starts)
        s, starts = self.text[path]
        at = starts[line - 1]
        text = s[at:s.find("\n", at)]
        return s, at + len(text.encode("utf-8")[:col - 1].decode("utf-8", "ignore"))

    def condition(self, path, line, col):
        """(macro, the condition's text) of the AG_CHECK* at line:col, or (None, None)."""
        s, i = self.offset(path, line, col)
        m = re.compile(r"AG_CHECK\w*\s*\(").match(s, i)
        if not m:
            return None, None
        k, depth = m.end(), 0
        while k < len(s):
            c = s[k]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif c == "," and depth == 0:
                break
            elif c == '"':
                k += 1
                while s[k] != '"':
                    k += 2 if s[k] == "\\" else 1
            k += 1
        return s[m.start():m.end() - 1].rstrip(" ("), " ".join(s[m.end():k].split())


def split_top(text, op):
    """text split at `op` (&& or ||) outside brackets, strings and character literals."""
    pieces, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif depth == 0 and text.startswith(op, i):
            pieces.append(text[start:i])
            start = i + len(op)
            i += len(op)
            continue
        i += 1
    return pieces + [text[start:]]


def unwrap(text):
    """text without the parentheses around all of it."""
    text = text.strip()
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, c in enumerate(text):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def parts(condition):
    """The conditions of a && / || expression in the order clang lists their branches: an operator's
    operands are visited (their own conditions listed) before the operator lists those of its operands
    that are conditions themselves (not && or ||), so `a && (b || c)` gives b, c, a."""
    def visit(text):
        text = unwrap(text)
        for op in ("||", "&&"):  # || binds loosest; a chain is left-associative
            pieces = split_top(text, op)
            if len(pieces) > 1:
                left, right = op.join(pieces[:-1]), pieces[-1]
                out = visit(left) + visit(right)
                for side in (left, right):
                    if not is_logical(side):
                        out.append(unwrap(side))
                return out
        return []

    def is_logical(text):
        text = unwrap(text)
        return len(split_top(text, "||")) > 1 or len(split_top(text, "&&")) > 1

    return visit(condition) if is_logical(condition) else [unwrap(condition)]


def report(folder, only):
    exported = os.path.join(folder, "export.json")
    if not os.path.exists(exported):
        sys.exit(f"untested_checks: {exported} does not exist: run without --report-only first")
    data = json.load(open(exported))
    sources = Sources()
    checks = collections.OrderedDict()  # (file, line, col) -> [(true, false)] per branch, summed over the binaries
    for entry in data["data"]:
        for f in entry["files"]:
            path = f["filename"]
            rel = os.path.relpath(path, ROOT)
            if rel.startswith(("..", "tests/", "build")) or not re.search(only, rel):
                continue
            for e in f.get("expansions", []):
                line, col = e["source_region"][:2]
                if e["filenames"][0] != path:
                    continue
                counts = [(b[4], b[5]) for b in e["branches"]]
                key = (rel, line, col)
                if key not in checks:
                    checks[key] = counts
                elif len(checks[key]) == len(counts):
                    checks[key] = [(a + c, b + d) for (a, b), (c, d) in zip(checks[key], counts)]
    ran = never = partial = 0
    for (rel, line, col), counts in checks.items():
        macro, condition = sources.condition(os.path.join(ROOT, rel), line, col)
        if macro is None or not counts:
            continue
        ran += 1
        names = parts(condition)
        if len(names) == 1:  # one branch, on !(cond): its true side is the check firing
            if counts[0][0] == 0:
                never += 1
                print(f"NEVER  {rel}:{line}  {macro}({condition[:160]})  [passed {counts[0][1]} times]")
            continue
        # The conditions' branches come first (in clang's order, `parts`), then a message's ternaries.
        known = len(counts) >= len(names)
        conds = counts[:len(names)] if known else counts
        bad = [(i, t, f) for i, (t, f) in enumerate(conds) if t == 0 or f == 0]
        if bad:
            partial += 1
            print(f"PARTS  {rel}:{line}  {macro}({condition[:200]})")
            for i, t, f in bad:
                name = names[i] if known else f"part {i + 1}"
                print(f"         {name[:80]:80s}  true {t}, false {f}")
    print(f"untested_checks: {ran} checks ran; {never} of one condition never fired; "
          f"{partial} compound ones with a part that never took a side", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default=os.path.join(ROOT, "build-coverage"),
                        help="the coverage build and its profile (default: build-coverage/)")
    parser.add_argument("--report-only", action="store_true", help="read the last run's export.json again")
    parser.add_argument("--only", default="", help="a regular expression the files' paths must match")
    args = parser.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    if not args.report_only:
        build_and_run(args.folder)
    report(args.folder, args.only)


if __name__ == "__main__":
    main()
