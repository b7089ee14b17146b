#!/usr/bin/env python3
"""Checkpoint mutation campaign: corrupts a real char_lm checkpoint in every way
issue 10 lists, loads each mutant, and counts what happened.

    python3 scripts/mutate_checkpoints.py --quick       # CI's subset (scripts/sanitize.sh)
    python3 scripts/mutate_checkpoints.py               # the full campaign
    python3 scripts/mutate_checkpoints.py --char-lm     # ...also through char_lm sample / train --resume

It trains a tiny model with build-sanitize/char_lm (ASan + UBSan; built by
scripts/build_sanitize.sh if missing), then writes mutants of model.safetensors
and train_state.safetensors: header lengths off by one or more, truncations,
trailing bytes, offsets that alias, overlap or leave holes, duplicate keys,
dtype changes (moments stored as I32, ...), huge and transposed shapes, deep
nesting, metadata values that would force huge models, non-finite values,
renamed and missing tensors, random bit flips, and valid re-encodings.

Each mutant is loaded by fuzz/check_safetensors (one process each, so a crash
is counted) with the demands a checkpoint makes: every tensor the dtype the
original has, floating ones finite. Outcomes:
  refused cleanly     an ag::Error naming the file
  accepted correctly  the loaded tensors and metadata equal the original's bytes
  accepted, different a well-formed file that says something else (values,
                      names, shapes, metadata): only the checkpoint code, which
                      knows the model, can refuse it
  crashed             a signal, a sanitizer report, a hang, or a message
                      that does not name the file
Each mutant also carries an expectation; the campaign fails (status 1) on a
crash, on a mutant the format itself rules out that was accepted, and on a
valid re-encoding that was not accepted identically. --char-lm also runs the
mutants through char_lm, in a copy of the run whose newest unit holds the
mutant with its manifest resealed to match (so the checkpoint code's own
checks are tested, not the checksum), and reports what that code did. It fails
the campaign where char_lm broke its own promises (issue 22): a non-finite
option, a file without its __metadata__, or a tensor no version writes that
was not refused; or a refusal (but a diverged run's) that does not name the
file and the key the mutant changed.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What the loader must do with a mutant.
REFUSE = "refuse"        # the format rules it out
IDENTICAL = "identical"  # a valid re-encoding: accepted, and equal to the original
ANY = "any"              # format-valid or unknowable (bit flips): anything but a crash


class Obj(list):
    """A JSON object as its (key, value) pairs: keeps order and duplicate keys."""


def parse_json(text):
    return json.loads(text, object_pairs_hook=Obj)


def dump_json(value):
    if isinstance(value, Obj):
        return "{" + ",".join(json.dumps(k) + ":" + dump_json(v) for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump_json(v) for v in value) + "]"
    return json.dumps(value)


def get(obj, key):
    return next(v for k, v in obj if k == key)


def replaced(obj, key, value):
    return Obj((k, value if k == key else v) for k, v in obj)


class Checkpoint:
    """One safetensors file, split into its parts."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.bytes = f.read()
        self.path = path
        self.name = os.path.basename(path)
        (self.header_len,) = struct.unpack("<Q", self.bytes[:8])
        self.header = parse_json(self.bytes[8:8 + self.header_len])
        self.data = self.bytes[8 + self.header_len:]
        self.tensors = [(k, v) for k, v in self.header if k != "__metadata__"]
        self.metadata = next((v for k, v in self.header if k == "__metadata__"), Obj())

    def file(self, header=None, data=None, pad=True, header_len=None):
        """The file's bytes with `header` (an Obj or raw text) and `data` swapped in."""
        header = self.header if header is None else header
        text = (header if isinstance(header, str) else dump_json(header)).encode()
        if pad:
            text += b" " * (-len(text) % 8)
        length = len(text) if header_len is None else header_len
        return struct.pack("<Q", length) + text + (self.data if data is None else data)

    def with_entry(self, name, entry):
        return replaced(self.header, name, entry)

    def with_field(self, name, field, value):
        return self.with_entry(name, replaced(get(self.header, name), field, value))

    def with_metadata(self, metadata):
        return replaced(self.header, "__metadata__", metadata)


ELEMENT_SIZE = {"F32": 4, "F64": 8, "I64": 8, "I32": 4}
FORMAT = {"F32": "<f", "F64": "<d", "I64": "<q", "I32": "<i"}


def representatives(tensors):
    """One tensor per family and dtype: "iter", "rng.batch", "optim.exp_avg_sq", "blocks", "ln_f"..."""
    chosen = {}
    for name, entry in tensors:
        parts = name.split(".")
        family = ".".join(parts[:2]) if parts[0] in ("optim", "rng") else parts[0]
        chosen.setdefault((family, get(entry, "dtype")), (name, entry))
    return list(chosen.values())


def mutants(ck, quick, rng):
    """(kind, description, bytes, expectation) for one checkpoint file."""
    n, size = ck.header_len, len(ck.bytes)
    sample = representatives(ck.tensors) if quick else ck.tensors

    # Header length and file length.
    for delta in (-8, -1, 1, 8):
        yield "header length", f"header length {delta:+d}", ck.file(header_len=n + delta), REFUSE
    for length in (0, 1, size, size - 8, 2**63, 2**64 - 1):
        yield "header length", f"header length {length}", struct.pack("<Q", length) + ck.bytes[8:], REFUSE
    for cut in sorted({0, 4, 7, 8, 9, 8 + n // 2, 8 + n - 1, 8 + n, 8 + n + 1, 8 + n + len(ck.data) // 2, size - 1}):
        yield "truncation", f"cut at byte {cut}", ck.bytes[:cut], REFUSE
    for extra in (b"\0", b"\0" * 8, bytes(range(256)) * 16, ck.bytes):
        yield "trailing data", f"{len(extra)} trailing bytes", ck.bytes + extra, REFUSE

    # Offsets.
    for name, entry in sample:
        begin, end = get(entry, "data_offsets")
        element = ELEMENT_SIZE[get(entry, "dtype")]
        for other, other_entry in ck.tensors:
            if other != name and get(other_entry, "data_offsets")[1] - get(other_entry, "data_offsets")[0] == end - begin:
                other_offsets = get(other_entry, "data_offsets")
                yield "offsets", f"{name} reads {other}'s bytes", ck.file(ck.with_field(name, "data_offsets", other_offsets)), REFUSE
                swapped = ck.with_field(name, "data_offsets", other_offsets)
                swapped = replaced(swapped, other, replaced(other_entry, "data_offsets", [begin, end]))
                yield "offsets", f"{name} and {other} swap bytes", ck.file(swapped), ANY
                break
        for shift in (-element, element):
            if begin + shift >= 0:
                yield "offsets", f"{name} shifted {shift:+d}", ck.file(ck.with_field(name, "data_offsets", [begin + shift, end + shift])), REFUSE
        yield "offsets", f"{name} overlaps the next", ck.file(ck.with_field(name, "data_offsets", [begin, end + element])), REFUSE
        for offsets in ([end, begin], [begin, 2**64 - 1], [-begin - 1, end], [begin], [begin, end, end], "0"):
            yield "offsets", f"{name} data_offsets {offsets}", ck.file(ck.with_field(name, "data_offsets", offsets)), REFUSE

    # Duplicate keys.
    first, first_entry = ck.tensors[0]
    yield "duplicate keys", f"tensor {first} twice", ck.file(Obj(list(ck.header) + [(first, first_entry)])), REFUSE
    yield "duplicate keys", "dtype twice", ck.file(ck.with_entry(first, Obj([("dtype", "I32")] + list(first_entry)))), REFUSE
    if ck.metadata:
        key, value = ck.metadata[0]
        yield "duplicate keys", f"metadata {key} twice", ck.file(ck.with_metadata(Obj(list(ck.metadata) + [(key, value)]))), REFUSE
        yield "duplicate keys", "__metadata__ twice", ck.file(Obj(list(ck.header) + [("__metadata__", ck.metadata)])), REFUSE

    # Dtypes: same-size changes are well-formed files the demands refuse.
    changes = {"F32": ["I32", "F64", "F16", "BF16", "f32", ""], "I64": ["F64", "I32", "U64", "i64"]}
    for name, entry in sample:
        for dtype in changes.get(get(entry, "dtype"), []):
            yield "dtype", f"{name} stored as {dtype!r}", ck.file(ck.with_field(name, "dtype", dtype)), REFUSE

    # Shapes.
    for name, entry in sample:
        shape = get(entry, "shape")
        for bad in ([2**62, 2**62], [2**63 - 1], [2**64 - 1], [0, 2**62, 2**62], [2**62, 2**62, 0], [-1], [1.5], "2",
                    shape + [2], [d * 2 for d in shape]):
            yield "shape", f"{name} shape {bad}", ck.file(ck.with_field(name, "shape", bad)), REFUSE
        yield "shape", f"{name} shape {shape}+[1]", ck.file(ck.with_field(name, "shape", shape + [1])), ANY
        if len(shape) == 2 and shape[0] != shape[1]:
            yield "shape", f"{name} transposed", ck.file(ck.with_field(name, "shape", shape[::-1])), ANY
        both = ck.with_field(name, "shape", [2**40, 2**40])
        yield "shape", f"{name} huge shape and offsets", ck.file(replaced(both, name, replaced(get(both, name), "data_offsets", [0, 2**82]))), REFUSE

    # Deep nesting: the 2 MB header nested 10^6 deep overflowed the stack.
    for depth in (9, 10**5, 10**6):
        nested = "[" * depth + "]" * depth
        text = dump_json(ck.header).replace(dump_json(get(first_entry, "shape")), nested, 1)
        yield "nesting", f"shape nested {depth} deep", ck.file(text), REFUSE
    yield "nesting", "metadata nested 10^6 deep", ck.file('{"__metadata__":' + "{\"k\":" * 10**6 + '""' + "}" * 10**6 + "}", data=b""), REFUSE

    # Metadata: values only the checkpoint code can judge, and malformed ones.
    values_to_judge = {"n_embd": ["16384", "1e18", "-32"], "n_layer": ["100000", "0", "-1"], "n_head": ["0", "7"],
                   "vocab_size": ["1000000000", "9223372036854775807"], "block_size": ["9223372036854775807", "0"],
                   "iter": ["-1", "9223372036854775807"], "chars": ["not json", '"ab"'], "gelu": ["relu"],
                   "lr": ["1e300", "nan", "-1", "inf"], "weight-decay": ["inf"], "grad-clip": ["inf"], "min-lr": ["-inf"],
                   "max-iters": ["-5", "1e18"], "n-layer": ["100000"], "n-embd": ["16384"]}
    for key, value in ck.metadata:
        for new in values_to_judge.get(key, []):
            yield "metadata", f"{key} = {new!r}", ck.file(ck.with_metadata(replaced(ck.metadata, key, new))), ANY
        yield "metadata", f"{key} not a string", ck.file(ck.with_metadata(replaced(ck.metadata, key, 16384))), REFUSE
    yield "metadata", "metadata not an object", ck.file(ck.with_metadata(["a"])), REFUSE
    if ck.metadata:
        yield "metadata", "__metadata__ removed", ck.file(Obj((k, v) for k, v in ck.header if k != "__metadata__")), ANY

    # Values: non-finite floats (the demands refuse), and values the checkpoint code must judge.
    offset_of = {name: get(entry, "data_offsets")[0] for name, entry in ck.tensors}
    for name, entry in sample:
        dtype, at = get(entry, "dtype"), offset_of[name]
        if dtype in ("F32", "F64"):
            for value in (float("nan"), float("inf"), float("-inf")):
                data = ck.data[:at] + struct.pack(FORMAT[dtype], value) + ck.data[at + ELEMENT_SIZE[dtype]:]
                yield "values", f"{name}[0] = {value}", ck.file(data=data), REFUSE
        if dtype == "F32" and "exp_avg_sq" in name and at + 4 <= len(ck.data):
            (v,) = struct.unpack_from("<f", ck.data, at)
            data = ck.data[:at] + struct.pack("<f", -abs(v) - 1.0) + ck.data[at + 4:]
            yield "values", f"{name}[0] negative", ck.file(data=data), ANY
        if dtype == "I64":
            for value in (-1, 2**63 - 1):
                data = ck.data[:at] + struct.pack("<q", value) + ck.data[at + 8:]
                yield "values", f"{name} = {value}", ck.file(data=data), ANY

    # Names: renamed and missing tensors are well-formed files.
    yield "names", f"{first} renamed", ck.file(Obj((k + "x" if k == first else k, v) for k, v in ck.header)), ANY
    last, last_entry = max(ck.tensors, key=lambda t: get(t[1], "data_offsets")[0])
    begin = get(last_entry, "data_offsets")[0]
    yield "names", f"{last} missing", ck.file(Obj((k, v) for k, v in ck.header if k != last), data=ck.data[:begin]), ANY
    end = len(ck.data)
    extra = Obj([("dtype", "F32"), ("shape", [2]), ("data_offsets", [end, end + 8])])
    yield "names", "rng.extra added", ck.file(Obj(list(ck.header) + [("rng.extra", extra)]), data=ck.data + bytes(8)), ANY

    # Valid re-encodings must load identically.
    yield "re-encoding", "unpadded", ck.file(pad=False), IDENTICAL
    yield "re-encoding", "spaced JSON", ck.file(json.dumps(json.loads(ck.bytes[8:8 + n]), indent=1)), IDENTICAL
    yield "re-encoding", "entries reversed", ck.file(Obj(reversed(ck.header))), IDENTICAL
    yield "re-encoding", "names \\u-escaped", ck.file(dump_json(ck.header).replace('"' + first + '"', '"' + "".join(f"\\u{ord(c):04x}" for c in first) + '"', 1)), IDENTICAL

    # Random bit flips, in the header and in the data.
    flips = 40 if quick else 600
    for region, lo, hi in (("header", 8, 8 + n), ("data", 8 + n, size)):
        for _ in range(flips if hi > lo else 0):
            at, bit = rng.randrange(lo, hi), rng.randrange(8)
            flipped = bytearray(ck.bytes)
            flipped[at] ^= 1 << bit
            yield f"bit flip ({region})", f"byte {at} bit {bit}", bytes(flipped), ANY


def check(tool, original, mutant_path):
    """Runs check_safetensors: (outcome, detail)."""
    try:
        r = subprocess.run([tool, mutant_path, original], capture_output=True, text=True, timeout=60, errors="replace")
    except subprocess.TimeoutExpired:
        return "crashed", "hung for 60 s"
    out = (r.stdout.strip() or r.stderr.strip()).splitlines()
    first = out[0][:300] if out else ""
    outcome = {0: "accepted correctly", 2: "accepted, different", 3: "refused cleanly"}.get(r.returncode)
    if outcome:
        return outcome, first
    if r.returncode == 4:
        return "crashed", "message does not name the file: " + first
    report = next((line for line in r.stderr.splitlines() if "ERROR" in line or "runtime error" in line), first)
    return "crashed", f"status {r.returncode}: {report[:300]}"


def violation(expect, outcome):
    if outcome == "crashed":
        return True
    if expect == REFUSE:
        return outcome != "refused cleanly"
    if expect == IDENTICAL:
        return outcome != "accepted correctly"
    return False


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def char_lm_must_refuse(kind, what):
    """Mutants char_lm must refuse though the format allows them (issue 22): a
    non-finite option, a file without its options, a tensor no version writes."""
    return (kind == "metadata" and any(what.endswith(f"= {v!r}") for v in ("inf", "-inf", "nan"))) or \
        what in ("__metadata__ removed", "rng.extra added")


def key_of(kind, what):
    """The metadata key or tensor a mutant changes, which a refusal must name (None: no single one)."""
    if kind in ("metadata", "dtype", "values", "shape", "names") and not what.startswith(("__metadata__", "metadata ")):
        return what.split(" ")[0].split("[")[0]  # "optim.exp_avg.w[0] = nan": optim.exp_avg.w
    return None


def names_key(output, key):
    """True if `output` names `key`: as a key (n_head, n-head), the option it is
    (--n-head), or for the optimizer's optim.<state>.<parameter> the parameter."""
    if key is None or key in output or key.replace("_", "-") in output:
        return True
    return key.startswith("optim.") and key.split(".", 2)[-1] in output


def char_lm_run(build, text, run, unit, file_name, mutant_bytes, work):
    """Runs char_lm on a copy of the run whose newest unit holds the mutant: (outcome, detail).
    The unit's manifest is resealed to match, so that what is tested is the
    checkpoint code's own checks, not the checksum in front of them."""
    copy = tempfile.mkdtemp(dir=work)
    try:
        run_dir = os.path.join(copy, "run")
        shutil.copytree(run, run_dir, symlinks=True)
        unit_dir = os.path.join(run_dir, os.path.relpath(unit, run))
        with open(os.path.join(unit_dir, file_name), "wb") as f:
            f.write(mutant_bytes)
        manifest_path = os.path.join(unit_dir, "manifest.json")
        if os.path.exists(manifest_path):
            with open(manifest_path) as f:
                manifest = json.load(f)
            manifest["files"][file_name] = {"bytes": len(mutant_bytes), "fnv1a64": fnv1a64(mutant_bytes)}
            with open(manifest_path, "w") as f:
                json.dump(manifest, f)
        char_lm = os.path.join(build, "char_lm")
        if file_name == "model.safetensors":
            cmd = [char_lm, "sample", "--ckpt", run_dir, "--tokens", "20"]
        else:
            cmd = [char_lm, "train", "--resume", "--out", run_dir, "--data", text, "--max-iters", "22"]
        env = dict(os.environ, ASAN_OPTIONS="hard_rss_limit_mb=3072:" + os.environ.get("ASAN_OPTIONS", ""))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, errors="replace")
        except subprocess.TimeoutExpired:
            return "ran over 120 s", ""
        output = r.stderr + r.stdout
        lines = output.strip().splitlines()
        detail = next((line for line in lines if "ERROR" in line or "runtime error" in line or "error" in line.lower()),
                      lines[-1] if lines else "")[:300]
        if r.returncode == 0:
            return "accepted (ran)", ""
        if "hard rss limit" in output:
            return "over 3 GB of memory", ""
        if r.returncode < 0 or "Sanitizer" in output or "runtime error" in output:
            return "crashed", detail
        # Clean: the message names the mutant file, or its unit when the pair disagrees.
        return ("refused cleanly" if unit_dir in output else "refused, file not named"), output
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def run_through_char_lm(build, text, run, unit, work, jobs, results):
    """Reports what char_lm's checkpoint code does with the mutants the loader's
    format checks let through (all but bit flips), and with those only the
    demands refused (dtypes, values), which char_lm does not make yet. Returns
    the broken promises: a mutant char_lm must refuse that it did not, and a
    refusal (but a diverged run's) that does not name the file and the key."""
    print("\nThrough char_lm (sample for model.safetensors, train --resume for train_state.safetensors):")
    outcomes = ["refused cleanly", "accepted (ran)", "refused, file not named", "crashed", "over 3 GB of memory",
                "ran over 120 s"]
    table = collections.defaultdict(collections.Counter)
    ran, problems, broken = collections.defaultdict(list), [], []
    for (file_name, kind, what, _, path, _), (outcome, _) in zip(jobs, results):
        if kind.startswith("bit flip") or outcome == "refused cleanly" and kind not in ("dtype", "values"):
            continue
        with open(path, "rb") as f:
            got, detail = char_lm_run(build, text, run, unit, file_name, f.read(), work)
        table[(file_name, kind)][got] += 1
        output, detail = detail, next((line for line in detail.splitlines() if "char_lm" in line), detail)[:300]
        key = key_of(kind, what)
        if got == "accepted (ran)" and outcome != "accepted correctly":
            ran[(file_name, kind)].append(what)
        elif got not in ("refused cleanly", "accepted (ran)"):
            problems.append(f"{file_name}: {kind}: {what}: {got}" + (f": {detail}" if detail else ""))
        if char_lm_must_refuse(kind, what) and got != "refused cleanly":
            broken.append(f"{file_name}: {kind}: {what}: must be refused, got {got}")
        elif got.startswith("refused") and "training diverged" not in output and not (got == "refused cleanly" and names_key(output, key)):
            broken.append(f"{file_name}: {kind}: {what}: the refusal names not " + ("the file" if got != "refused cleanly" else f"'{key}'") + f": {detail}")
    print(f"{'file':24} {'mutant kind':22} " + " ".join(f"{o:>24}" for o in outcomes))
    for (file_name, kind), counts in sorted(table.items()):
        print(f"{file_name:24} {kind:22} " + " ".join(f"{counts[o]:24}" for o in outcomes))
    print("\nchar_lm ran with a mutant that differs from the original:")
    for (file_name, kind), items in sorted(ran.items()):
        print(f"  {file_name}: {kind}: {len(items)}, e.g. " + "; ".join(items[:4]))
    print("\nchar_lm did not refuse cleanly:")
    for problem in problems:
        print("  " + problem)
    return broken


def find_text():
    for path in (os.environ.get("ATTOGRAD_DATA", ""), os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"),
                 os.path.join(ROOT, "data", "tinyshakespeare.txt")):
        if path and os.path.isfile(path):
            return path
    return os.path.join(ROOT, "docs", "backprop.md")  # any text will do for a 20-iteration model


def train(build, text, out):
    cmd = [os.path.join(build, "char_lm"), "train", "--data", text, "--out", out, "--max-iters", "20",
           "--eval-interval", "10", "--n-layer", "1", "--n-embd", "32", "--block-size", "16", "--batch-size", "4"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    # The unit holding both files: the run directory, or its newest subdirectory holding them.
    units = [d for d, _, files in os.walk(out) if "model.safetensors" in files and "train_state.safetensors" in files]
    if not units:
        sys.exit(f"mutate_checkpoints.py: training wrote no checkpoint under {out}")
    return max(units, key=lambda d: os.path.getmtime(os.path.join(d, "model.safetensors")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI's subset: 3 tensors per file, 40 bit flips per region")
    parser.add_argument("--char-lm", action="store_true", help="also run accepted mutants through char_lm")
    parser.add_argument("--build", default=os.path.join(ROOT, "build-sanitize"), help="build with char_lm and fuzz/check_safetensors")
    parser.add_argument("--seed", type=int, default=10, help="seed of the bit flips")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="mutants checked at once")
    args = parser.parse_args()

    tool = os.path.join(args.build, "fuzz", "check_safetensors")
    if not os.path.exists(tool):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "build_sanitize.sh")], check=True)
    work = tempfile.mkdtemp(prefix="attograd_mutants_")
    try:
        text = find_text()
        run = os.path.join(work, "run")
        unit = train(args.build, text, run)
        print(f"mutate_checkpoints.py: trained on {os.path.relpath(text, ROOT)}; mutating {os.path.relpath(unit, work)}/")
        rng = random.Random(args.seed)
        jobs = []
        for file_name in ("model.safetensors", "train_state.safetensors"):
            ck = Checkpoint(os.path.join(unit, file_name))
            for i, (kind, what, data, expect) in enumerate(mutants(ck, args.quick, rng)):
                path = os.path.join(work, f"{file_name}.{i}")
                with open(path, "wb") as f:
                    f.write(data)
                jobs.append((file_name, kind, what, expect, path, ck.path))

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda j: check(tool, j[5], j[4]), jobs))

        outcomes = ["refused cleanly", "accepted correctly", "accepted, different", "crashed"]
        table = collections.defaultdict(collections.Counter)
        failures, different = [], collections.defaultdict(lambda: collections.defaultdict(list))
        for (file_name, kind, what, expect, path, _), (outcome, detail) in zip(jobs, results):
            table[(file_name, kind)][outcome] += 1
            if violation(expect, outcome):
                failures.append(f"{file_name}: {kind}: {what}: expected {expect}, got {outcome}: {detail}")
            elif outcome == "accepted, different":
                different[file_name][kind].append(what)

        print(f"{'file':24} {'mutant kind':22} {'tried':>6} " + " ".join(f"{o:>20}" for o in outcomes))
        for (file_name, kind), counts in sorted(table.items()):
            print(f"{file_name:24} {kind:22} {sum(counts.values()):6} " + " ".join(f"{counts[o]:20}" for o in outcomes))
        total = collections.Counter()
        for counts in table.values():
            total.update(counts)
        print(f"{'all':47} {sum(total.values()):6} " + " ".join(f"{total[o]:20}" for o in outcomes))
        for file_name, by_kind in different.items():
            print(f"\nWell-formed {file_name} mutants the loader accepted, different from the original;")
            print("the checkpoint code, which knows the model, must judge them:")
            for kind, items in by_kind.items():
                print(f"  {kind}: {len(items)}, e.g. " + "; ".join(items[:4]))

        if args.char_lm:
            failures += run_through_char_lm(args.build, text, run, unit, work, jobs, results)

        if failures:
            print(f"\n{len(failures)} mutants broke the loader's promise:")
            for f in failures:
                print("  " + f)
            return 1
        print(f"\nmutate_checkpoints.py: {sum(total.values())} mutants, none crashed, every format violation refused")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
