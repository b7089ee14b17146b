"""Holds attograd's safetensors files against the reference implementation (PyPI
`safetensors`, its NumPy API), both ways. Run it through
scripts/safetensors_roundtrip.sh, which makes its virtual environment:

    bash scripts/safetensors_roundtrip.sh                    # check both ways
    bash scripts/safetensors_roundtrip.sh --write-fixtures   # ...and rewrite tests/golden/safetensors/

attograd -> library. A tiny `char_lm train` on a text with non-ASCII characters
writes model.safetensors (F32 weights; the model's options and its characters
in __metadata__) and train_state.safetensors (F32 moments, I64 counters, the
run's options). The library writes a batch (idx, targets [B, T]) as I64 and as
I32; `char_lm grads` turns each into gradients (F64, the loss a shape-[] tensor),
and `safetensors_json --resave` writes the I32 batch back through attograd's
writer, widened to I64 (char_lm itself writes no batch). Each file attograd
wrote must load in safetensors.numpy.load_file with the names, shapes, dtypes
and bytes that attograd's own reader gives (build/safetensors_json, which
prints them as JSON), and safe_open(...).metadata() must be its __metadata__.

library -> attograd. The library writes one fixture per case: F32, F64, I32,
I64, F16, BF16 (through safetensors.serialize_file: NumPy has no bfloat16),
empty tensors, non-ASCII metadata and tensor names, tensors whose data order is
not their name order, and BOOL, which attograd does not read. Each must load in
attograd with the names (in data order), shapes and exact values the script
wrote, widened by attograd's rule (I32 to int64; F16, BF16 to float32), and
the same __metadata__; or, for a dtype attograd does not read, be refused with
a message that names the file and the reason. --write-fixtures writes them,
with expected.json (what each holds, from the arrays written), into
tests/golden/safetensors/, which tests/test_safetensors_library.cpp reads with
no network and no Python; without it they go to a temporary directory and are
compared with the committed ones.

Exits 1 on any disagreement.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
import safetensors.numpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE_DIR = os.path.join(ROOT, "tests", "golden", "safetensors")
# The dtype attograd loads each file dtype as (core/safetensors.cpp, kFileDTypes); others are refused.
ATTOGRAD_LOADS_AS = {"F32": "float32", "F64": "float64", "I64": "int64", "I32": "int64",
                     "F16": "float32", "BF16": "float32"}
# Data order differs from name order here; a fixture that loses that is reported (see write_fixtures).
ORDER_FIXTURE = "order.safetensors"

failures = []


def fail(message):
    failures.append(message)
    print("    FAIL: " + message)


def attograd_view(tool, path, resave=None):
    """What attograd reads from `path` (safetensors_json's JSON), or (None, its error message)."""
    cmd = [tool, path] + (["--resave", resave] if resave else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def library_metadata(path):
    with safetensors.safe_open(path, framework="np") as f:
        return f.metadata() or {}


# --- attograd -> library ---------------------------------------------------------------------

TEXT = ("ROMEO: a naïve café, déjà vu — 日本語の文章も少し。 Über straße, señor!\n"
        "JULIET: «quoth» the raven; ça va? 東京 → 京都 … fin.\n") * 40


def train(char_lm, work):
    text = os.path.join(work, "text.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(TEXT)
    run = os.path.join(work, "run")
    subprocess.run([char_lm, "train", "--data", text, "--out", run, "--max-iters", "20", "--eval-interval", "10",
                    "--eval-iters", "2", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
                    "--batch-size", "4", "--sample-tokens", "0", "--threads", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    units = sorted(d for d in os.listdir(run) if d.startswith("ckpt-"))
    return os.path.join(run, units[-1])


def check_against_library(tool, path, what):
    """One file attograd wrote: the library's view must be attograd's own."""
    mine, error = attograd_view(tool, path)
    if mine is None:
        fail(f"{what}: attograd does not read its own file: {error}")
        return None
    theirs = safetensors.numpy.load_file(path)
    name = os.path.basename(path)
    mine_by_name = {t["name"]: t for t in mine["tensors"]}
    if set(theirs) != set(mine_by_name):
        fail(f"{name}: names differ: library only {sorted(set(theirs) - set(mine_by_name))}, "
             f"attograd only {sorted(set(mine_by_name) - set(theirs))}")
    dtypes = {}
    for tensor_name in sorted(set(theirs) & set(mine_by_name)):
        a, t = theirs[tensor_name], mine_by_name[tensor_name]
        if a.dtype.name != t["dtype"] or list(a.shape) != t["shape"]:
            fail(f"{name}: {tensor_name}: library {a.dtype.name} {list(a.shape)}, attograd {t['dtype']} {t['shape']}")
        elif a.tobytes().hex() != t["hex"]:  # both little-endian, as the format is
            fail(f"{name}: {tensor_name}: the values differ")
        dtypes[a.dtype.name] = dtypes.get(a.dtype.name, 0) + 1
    metadata = library_metadata(path)
    if metadata != mine["metadata"]:
        keys = sorted(k for k in set(metadata) | set(mine["metadata"]) if metadata.get(k) != mine["metadata"].get(k))
        fail(f"{name}: __metadata__ differs at {keys}")
    counts = ", ".join(f"{n} {d}" for d, n in sorted(dtypes.items()))
    print(f"  {what:<44} {len(theirs):>3} tensors ({counts}), {len(metadata):>2} metadata keys: same")
    return theirs


def attograd_to_library(char_lm, tool, work):
    print("attograd -> safetensors: files attograd wrote, read by safetensors.numpy.load_file and safe_open(...).metadata()")
    unit = train(char_lm, work)
    model = os.path.join(unit, "model.safetensors")
    check_against_library(tool, model, "model.safetensors (char_lm train)")
    non_ascii = [c for c in json.loads(library_metadata(model)["chars"]) if ord(c) > 127]
    if "日" not in non_ascii or "ï" not in non_ascii:
        fail("model.safetensors: the characters in __metadata__ lost the text's non-ASCII ones")
    print(f"  {'':<44} (its 'chars' as the library reads them: {''.join(non_ascii)} among them)")
    check_against_library(tool, os.path.join(unit, "train_state.safetensors"), "train_state.safetensors (char_lm train)")

    # A batch as other tools write it, in both index dtypes char_lm grads reads.
    rng = np.random.default_rng(45)
    vocab_size = int(library_metadata(model)["vocab_size"])
    idx = rng.integers(0, vocab_size, size=(2, 8))
    targets = rng.integers(0, vocab_size, size=(2, 8))
    targets[1, 3] = -100  # ignored
    grads = {}
    for dtype in (np.int64, np.int32):
        name = np.dtype(dtype).name
        batch = os.path.join(work, f"batch_{name}.safetensors")
        safetensors.numpy.save_file({"idx": idx.astype(dtype), "targets": targets.astype(dtype)}, batch)
        out = os.path.join(work, f"grads_{name}.safetensors")
        subprocess.run([char_lm, "grads", "--weights", model, "--batch", batch, "--out", out],
                       check=True, stdout=subprocess.DEVNULL)
        grads[name] = check_against_library(tool, out, f"gradients (char_lm grads, {name} batch)")
    if grads["int64"] is not None and grads["int32"] is not None:
        same = grads["int64"].keys() == grads["int32"].keys() and all(
            grads["int64"][k].tobytes() == grads["int32"][k].tobytes() for k in grads["int64"])
        if same:
            print(f"  {'gradients of the int32 and int64 batches':<44} bit-identical")
        else:
            fail("the gradients of the int32 batch are not those of the same batch in int64")

    batch_i32 = os.path.join(work, "batch_int32.safetensors")
    resaved = os.path.join(work, "batch_resaved.safetensors")
    _, error = attograd_view(tool, batch_i32, resave=resaved)
    if error:
        fail(f"attograd does not read the int32 batch: {error}")
        return
    loaded = check_against_library(tool, resaved, "batch (safetensors_json --resave of int32)")
    if loaded is not None and not (np.array_equal(loaded["idx"], idx) and np.array_equal(loaded["targets"], targets)
                                   and loaded["idx"].dtype == np.int64):
        fail("the resaved batch does not hold the int32 batch's values as int64")


# --- library -> attograd ---------------------------------------------------------------------

def bfloat16_bits(values):
    """The BF16 encoding of float32 values that bfloat16 holds exactly: the top half of their bits."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    if np.any(bits & 0xFFFF):
        raise ValueError("a value bfloat16 does not hold exactly")
    return np.ascontiguousarray(bits >> 16, dtype=np.uint16)


F32 = np.finfo(np.float32)
# name: ({tensor: (dtype, array)}, metadata). BF16 arrays are float32 values bfloat16 holds exactly.
FIXTURES = {
    "f32.safetensors": ({"w": ("F32", np.array([[0.1, -0.0, F32.smallest_subnormal], [F32.max, -np.inf, np.nan]],
                                                np.float32))}, None),
    "f64.safetensors": ({"x": ("F64", np.array([0.1, -0.0, 5e-324, 1.7976931348623157e308])),
                         "scale": ("F64", np.array(math.pi))}, None),  # shape []: a scalar
    "i32.safetensors": ({"ids": ("I32", np.array([[0, -1, 7], [2**31 - 1, -2**31, 42]], np.int32))}, None),
    "i64.safetensors": ({"ids": ("I64", np.array([-2**63, 2**63 - 1, -1], np.int64))}, None),
    # 1, -0, the smallest and largest subnormal, the largest half, 0.1 rounded to half, -inf, NaN
    "f16.safetensors": ({"h": ("F16", np.array([[1.0, -0.0, 2.0**-24, 1023 * 2.0**-24],
                                                 [65504.0, 0.1, -np.inf, np.nan]], np.float16))}, None),
    # 1, -2, pi rounded to bfloat16, bfloat16's smallest subnormal (2^-133), +inf, -0
    "bf16.safetensors": ({"b": ("BF16", np.array([1.0, -2.0, 3.140625, 2.0**-133, np.inf, -0.0], np.float32))}, None),
    "empty.safetensors": ({"empty": ("F32", np.zeros((0, 3), np.float32)), "no_ids": ("I64", np.zeros(0, np.int64)),
                           "w": ("F32", np.array([1.5, -2.5], np.float32))}, None),
    "metadata.safetensors": ({"café.weight": ("F32", np.array([1.0, 2.0], np.float32))},
                             {"note": "naïve — 日本語", "emoji": "🙂 is four bytes in UTF-8",
                              "quoted": 'a "quoted" word,\nthen a new line', "empty": ""}),
    ORDER_FIXTURE: ({"a": ("F32", np.array([1.0, 2.0], np.float32)), "b": ("I64", np.array([3], np.int64)),
                     "c": ("F16", np.array([4.0, 5.0], np.float16)), "d": ("F64", np.array([6.0])),
                     "e": ("I32", np.array([7], np.int32))}, {"why": "the library orders data by alignment, then name"}),
    "bool.safetensors": ({"mask": ("BOOL", np.array([True, False, True]))}, None),
}


def write_fixture(path, tensors, metadata):
    """With safetensors.numpy.save_file; BF16, which NumPy lacks, with what save_file calls
    (a TensorSpec per tensor, then serialize_file), naming the dtype itself."""
    if not any(dtype == "BF16" for dtype, _ in tensors.values()):
        safetensors.numpy.save_file({name: a for name, (_, a) in tensors.items()}, path, metadata=metadata)
        return
    arrays = {name: bfloat16_bits(a) if dtype == "BF16" else a for name, (dtype, a) in tensors.items()}
    specs = {name: safetensors.TensorSpec(dtype="bfloat16" if tensors[name][0] == "BF16" else a.dtype.name,
                                          shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, a in arrays.items()}  # `arrays` keeps the bytes alive while they are written
    safetensors.serialize_file(specs, path, metadata=metadata)


def header_of(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def json_value(x):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)  # exact: every F16, BF16, F32 value is a double
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def write_fixtures(out):
    """Writes every fixture into `out` with expected.json: each file's tensors in data order, values exact."""
    os.makedirs(out, exist_ok=True)
    expected = {
        "source": f"scripts/safetensors_roundtrip.sh --write-fixtures: safetensors {safetensors.__version__} "
                  f"(safetensors.numpy.save_file; BF16 through safetensors.serialize_file), numpy {np.__version__}",
        "values": "row-major, exact; non-finite ones as \"nan\", \"inf\", \"-inf\"",
        "files": [],
    }
    for file_name, (tensors, metadata) in FIXTURES.items():
        path = os.path.join(out, file_name)
        write_fixture(path, tensors, metadata)
        header = header_of(path)
        in_data_order = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])
        for name in in_data_order:
            if header[name]["dtype"] != tensors[name][0]:
                sys.exit(f"{file_name}: the library wrote {name} as {header[name]['dtype']}, not {tensors[name][0]}")
        if file_name == ORDER_FIXTURE and in_data_order == sorted(in_data_order):
            sys.exit(f"{file_name}: the library now writes data in name order; choose dtypes that it reorders")
        expected["files"].append({
            "file": file_name,
            "metadata": dict(sorted(header.get("__metadata__", {}).items())),
            "tensors": [{"name": name, "dtype": tensors[name][0], "shape": list(tensors[name][1].shape),
                         "values": [json_value(x) for x in tensors[name][1].reshape(-1)]} for name in in_data_order],
        })
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        f.write(compact_json(expected) + "\n")
    return expected


def compact_json(expected):
    """expected.json with one line per tensor, so that a diff of the fixtures reads."""
    dump = lambda value: json.dumps(value, ensure_ascii=False)
    files = [f' {{"file": {dump(e["file"])}, "metadata": {dump(e["metadata"])}, "tensors": [\n' +
             ",\n".join("  " + dump(t) for t in e["tensors"]) + "]}" for e in expected["files"]]
    head = ",\n".join(f" {dump(k)}: {dump(v)}" for k, v in expected.items() if k != "files")
    return "{\n" + head + ',\n "files": [\n' + ",\n".join(files) + "\n]}"


def loaded_bytes(dtype, a):
    """The bytes attograd must give for array `a` stored as `dtype`: widened exactly by its rule."""
    return np.asarray(a, dtype=ATTOGRAD_LOADS_AS[dtype]).tobytes()


def library_to_attograd(tool, out, expected):
    print(f"safetensors -> attograd: files the library wrote ({out}), read by attograd")
    for entry in expected["files"]:
        path = os.path.join(out, entry["file"])
        tensors, _ = FIXTURES[entry["file"]]
        mine, error = attograd_view(tool, path)
        stored = ", ".join(f"{t['name']} {t['dtype']} {t['shape']}" for t in entry["tensors"])
        unread = [t for t in entry["tensors"] if t["dtype"] not in ATTOGRAD_LOADS_AS]
        if unread:
            reason = f'tensor "{unread[0]["name"]}": unsupported dtype "{unread[0]["dtype"]}"'
            if mine is not None:
                fail(f"{entry['file']}: loaded, but attograd does not read {unread[0]['dtype']}")
            elif path not in error or reason not in error:
                fail(f"{entry['file']}: refused without naming the file and '{reason}': {error}")
            else:
                print(f"  {entry['file']:<22} {stored}: refused: {error}")
            continue
        if mine is None:
            fail(f"{entry['file']}: refused: {error}")
            continue
        names = [t["name"] for t in mine["tensors"]]
        if names != [t["name"] for t in entry["tensors"]]:
            fail(f"{entry['file']}: tensors {names}, not in the file's data order {[t['name'] for t in entry['tensors']]}")
        for t, e in zip(mine["tensors"], entry["tensors"]):
            if t["name"] != e["name"]:
                continue  # reported above
            want = ATTOGRAD_LOADS_AS[e["dtype"]]
            if t["dtype"] != want or t["shape"] != e["shape"]:
                fail(f"{entry['file']}: {t['name']}: {t['dtype']} {t['shape']}, not {want} {e['shape']}")
            elif t["hex"] != loaded_bytes(e["dtype"], tensors[t["name"]][1]).hex():
                fail(f"{entry['file']}: {t['name']}: the values differ from those written")
        if mine["metadata"] != entry["metadata"]:
            fail(f"{entry['file']}: __metadata__ {mine['metadata']}, not {entry['metadata']}")
        widened = ", ".join(sorted({f"{e['dtype']} as {ATTOGRAD_LOADS_AS[e['dtype']]}" for e in entry["tensors"]
                                    if e["dtype"] not in ("F32", "F64", "I64")}))
        n = len(entry["metadata"])
        meta = f", {n} metadata key{'s' if n > 1 else ''}" if n else ""
        print(f"  {entry['file']:<22} {stored}: loads, data order, exact values{meta}" + (f" ({widened})" if widened else ""))


def content(path):
    """A file's content, for comparing two writes of it: the library writes __metadata__'s keys in
    no fixed order, so a safetensors file is its parsed header and its data bytes."""
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".json"):
        return json.loads(raw)
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def compare_with_committed(out):
    names = sorted(os.listdir(out))
    committed = sorted(os.listdir(FIXTURE_DIR)) if os.path.isdir(FIXTURE_DIR) else []
    differing = [n for n in names if n not in committed or
                 content(os.path.join(out, n)) != content(os.path.join(FIXTURE_DIR, n))]
    extra = [n for n in committed if n not in names]
    if differing or extra:
        fail(f"tests/golden/safetensors/ is not what this library version writes (differ: {differing}, only committed: "
             f"{extra}); rerun with --write-fixtures and commit if the change is the library's")
    else:
        print(f"  the {len(names)} files hold what the committed tests/golden/safetensors/ hold (headers, data, expected.json)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build holding char_lm and safetensors_json")
    parser.add_argument("--write-fixtures", action="store_true", help="rewrite tests/golden/safetensors/")
    args = parser.parse_args()
    char_lm, tool = os.path.join(args.build, "char_lm"), os.path.join(args.build, "safetensors_json")
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}; attograd from {args.build}")
    with tempfile.TemporaryDirectory(prefix="safetensors_roundtrip_") as work:
        attograd_to_library(char_lm, tool, work)
        out = FIXTURE_DIR if args.write_fixtures else os.path.join(work, "fixtures")
        if args.write_fixtures:
            shutil.rmtree(out, ignore_errors=True)
        expected = write_fixtures(out)
        library_to_attograd(tool, out, expected)
        if not args.write_fixtures:
            compare_with_committed(out)
    if failures:
        print(f"safetensors round trip: {len(failures)} disagreements")
        return 1
    print("safetensors round trip: both ways agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
