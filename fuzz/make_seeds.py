#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_load_safetensors: small safetensors files,
valid ones shaped like attograd's checkpoints and near-valid ones that each
break one rule of the format.

    python3 fuzz/make_seeds.py [DIR]     (default: fuzz/seeds)

The committed fuzz/seeds/ is this script's output; scripts/fuzz.sh checks that
they agree. Standard library only, and deterministic.
"""
import json
import os
import struct
import sys

NAN = float("nan")


def header_bytes(entries, metadata=None, pad=True):
    """The JSON header as attograd writes it: compact, padded with spaces to 8 bytes."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    header.update(entries)
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return text


PACK = {"F32": "f", "F64": "d", "I64": "q", "I32": "i", "F16": "e", "BF16": "H"}  # BF16: values given as their 16 bits


def safetensors(tensors, metadata=None, pad=True):
    """tensors: (name, dtype, shape, values) in data order -> the file's bytes."""
    entries, data = {}, b""
    for name, dtype, shape, values in tensors:
        raw = struct.pack("<%d%s" % (len(values), PACK[dtype]), *values)
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header = header_bytes(entries, metadata, pad)
    return struct.pack("<Q", len(header)) + header + data


def with_header(text, data=b""):
    """A file with `text` as its header, verbatim."""
    text = text.encode()
    return struct.pack("<Q", len(text)) + text + data


MODEL = [
    ("wte.weight", "F32", [4, 2], [0.5, -1.0, 0.25, 2.0, -0.125, 1.5, 3.0, -2.5]),
    ("blocks.0.attn.w_q.weight", "F32", [2, 2], [1.0, 0.0, 0.0, 1.0]),
    ("ln_f.bias", "F32", [2], [0.0, -0.5]),
]
MODEL_METADATA = {"n_layer": "1", "n_head": "1", "n_embd": "2", "block_size": "4", "vocab_size": "4",
                  "gelu": "erf", "chars": json.dumps("abc\n"), "iter": "20"}
TRAIN_STATE = [
    ("iter", "I64", [1], [20]),
    ("rng.batch.seed", "I64", [1], [1337]),
    ("optim.exp_avg.ln_f.bias", "F32", [2], [0.01, -0.02]),
    ("optim.exp_avg_sq.ln_f.bias", "F32", [2], [1e-4, 4e-4]),
    ("optim.step.ln_f.bias", "I64", [1], [20]),
]
TRAIN_OPTIONS = {"lr": "0.001", "n-layer": "1", "n-embd": "2", "max-iters": "20"}


def seeds():
    model = safetensors(MODEL, MODEL_METADATA)
    model_header_len = struct.unpack("<Q", model[:8])[0]
    yield "valid_model", model
    yield "valid_train_state", safetensors(TRAIN_STATE, TRAIN_OPTIONS)
    yield "valid_empty", safetensors([])
    yield "valid_metadata_only", safetensors([], {"format": "pt", "note": "[{\"brackets\"}] in a string"})
    yield "valid_dtypes", safetensors([
        ("f64", "F64", [2, 2], [1.0, -0.0, 1e-300, 2.0]),
        ("tokens", "I32", [3], [0, -7, 2147483647]),
        ("scalar", "F32", [], [0.5]),
        ("empty", "F32", [0, 3], []),
        ("ids", "I64", [2], [-1, 9223372036854775807]),
    ])
    # Half precision, widened to float32 on load: subnormal, infinity, NaN; BF16 1.0, -2.0, +inf.
    yield "valid_half", safetensors([
        ("h", "F16", [2, 2], [1.0, 2.0**-24, float("inf"), NAN]),
        ("b", "BF16", [3], [0x3f80, 0xc000, 0x7f80]),
    ])
    # The header lists tensors out of data order, as other writers may.
    yield "valid_unordered", with_header(
        '{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
        struct.pack("<2f", 1.0, 2.0))
    yield "valid_unpadded", safetensors(MODEL[:1], pad=False)

    # Near-valid: each breaks one rule.
    yield "bad_header_len_minus_1", struct.pack("<Q", model_header_len - 1) + model[8:]
    yield "bad_header_len_plus_1", struct.pack("<Q", model_header_len + 1) + model[8:]
    yield "bad_trailing_byte", model + b"\0"
    yield "bad_truncated", model[:-3]
    yield "bad_overlap", with_header(
        '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}',
        struct.pack("<3f", 1.0, 2.0, 3.0))
    yield "bad_hole", with_header(
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
        struct.pack("<3f", 1.0, 2.0, 3.0))
    yield "bad_duplicate_key", with_header(
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
        struct.pack("<2f", 1.0, 2.0))
    yield "bad_dtype_bool", with_header('{"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}', b"\0" * 2)
    yield "bad_shape_overflow", with_header(
        '{"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904,0],"data_offsets":[0,0]}}')
    yield "bad_nested", with_header('{"a":{"dtype":"F32","shape":' + "[" * 9 + "]" * 9 + ',"data_offsets":[0,0]}}')
    yield "bad_metadata_not_string", with_header('{"__metadata__":{"n_embd":16384}}')
    # Valid files a checkpoint's demands refuse: a NaN weight, a moment stored as I32.
    yield "demand_nan_weight", safetensors([("w", "F32", [2], [1.0, NAN])])
    yield "demand_i32_moment", safetensors([("optim.exp_avg.w", "I32", [2], [1, 2])])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
