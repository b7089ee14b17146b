"""Golden values for the LSTM op (ag::lstm, core/ops/lstm.cpp), from PyTorch's nn.LSTM in float64.

    /usr/bin/python3 scripts/make_golden_lstm.py   # writes tests/golden/lstm.safetensors

torch.nn.LSTM(C, C, batch_first=True), one layer, with random weights and biases (not PyTorch's
initialisation, so every weight matters). attograd stores the weights [in, out], as a Linear's:
    weight_ih = weight_ih_l0.T  [C, 4C],  weight_hh = weight_hh_l0.T  [C, 4C]
    bias_ih = bias_ih_l0 [4C],  bias_hh = bias_hh_l0 [4C]     (gates i, f, g, o in both)
For loss = sum(out * R), with R a fixed random tensor, the file holds (all F64):
    x, R, out [B, T, C]; weight_ih, weight_hh, bias_ih, bias_hh (attograd's layout);
    h_n, c_n [B, C] (the state after the last step); grad.<name> for x and the four parameters.
tests/test_lstm.cpp loads it (no torch at test time). The file is written by scripts/make_golden_block.py's
write_safetensors (8-byte little-endian header length, JSON header, raw little-endian bytes).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden_block import write_safetensors  # noqa: E402

B, T, C = 2, 9, 5
OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "lstm.safetensors"


def main():
    gen = torch.Generator().manual_seed(52)
    lstm = torch.nn.LSTM(C, C, batch_first=True).double()
    with torch.no_grad():
        for p in lstm.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    x = torch.randn(B, T, C, generator=gen, dtype=torch.float64, requires_grad=True)
    r = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    out, (h_n, c_n) = lstm(x)
    (out * r).sum().backward()

    params = {"weight_ih": lstm.weight_ih_l0, "weight_hh": lstm.weight_hh_l0,
              "bias_ih": lstm.bias_ih_l0, "bias_hh": lstm.bias_hh_l0}
    layout = {name: (p.T if name.startswith("weight") else p) for name, p in params.items()}
    tensors = {"x": x, "R": r, "out": out, "h_n": h_n[0], "c_n": c_n[0], **layout, "grad.x": x.grad}
    for name, p in params.items():
        tensors["grad." + name] = p.grad.T if name.startswith("weight") else p.grad
    write_safetensors(OUT, tensors, {"torch": torch.__version__, "script": "scripts/make_golden_lstm.py"})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
