#!/usr/bin/env bash
# Length extrapolation (issue 24): the default model (T = 64, 2000 iterations)
# trained with each position encoding, then evaluated at longer T with
# `char_lm eval --block-size T` (the run's own 20 evaluation batches of 12).
#
#   bash bench/extrapolation.sh OUT_DIR [CHAR_LM]
#
# Trains OUT_DIR/run_{learned,rope,alibi,none} unless they are there (about
# 4 minutes each on one core), then writes OUT_DIR/extrapolation.csv
# (position,T,val_loss; learned at T = 64 only: its positions end there) and
# OUT_DIR/extrapolation.svg (val loss against T, one line per encoding), and
# prints the table as markdown.
set -euo pipefail
out=$(realpath -m "${1:?usage: bench/extrapolation.sh OUT_DIR [CHAR_LM]}")
char_lm=$(realpath "${2:-build/char_lm}")
cd "$(dirname "$0")/.."
data=$(bash scripts/get_data.sh)
mkdir -p "$out"
positions=(learned rope alibi none)
lengths=(64 128 256 512)
for p in "${positions[@]}"; do
  [ -e "$out/run_$p/best" ] || "$char_lm" train --position "$p" --data "$data" --out "$out/run_$p" --threads 1 >"$out/train_$p.log"
done
echo "position,T,val_loss" >"$out/extrapolation.csv"
for p in "${positions[@]}"; do
  for T in "${lengths[@]}"; do
    [ "$p" = learned ] && [ "$T" -gt 64 ] && continue
    loss=$("$char_lm" eval --ckpt "$out/run_$p" --block-size "$T" --data "$data" | sed -n 's/.*val loss \([0-9.]*\).*/\1/p')
    echo "$p,$T,$loss" >>"$out/extrapolation.csv"
  done
done
/usr/bin/python3 - "$out/extrapolation.csv" "$out/extrapolation.svg" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
lengths = [64, 128, 256, 512]
table = {}
for r in rows:
    table.setdefault(r["position"], {})[int(r["T"])] = float(r["val_loss"])
print("| position | " + " | ".join(f"T = {T}" for T in lengths) + " |")
print("|---|" + "---|" * len(lengths))
for p, by_T in table.items():
    print(f"| {p} | " + " | ".join(f"{by_T[T]:.4f}" if T in by_T else "–" for T in lengths) + " |")
# The chart: x = log2 T, y = val loss, one polyline (and dots) per encoding.
W, H, left, right, top, bottom = 640, 400, 70, 150, 40, 50
losses = [v for by_T in table.values() for v in by_T.values()]
lo, hi = min(losses), max(losses)
lo, hi = lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)
x = lambda T: left + (lengths.index(T)) / (len(lengths) - 1) * (W - left - right)
y = lambda v: top + (hi - v) / (hi - lo) * (H - top - bottom)
colours = {"learned": "#1f77b4", "rope": "#ff7f0e", "alibi": "#2ca02c", "none": "#d62728"}
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">val loss against evaluation length (trained at T = 64)</text>',
       f'<line x1="{left}" y1="{H - bottom}" x2="{W - right}" y2="{H - bottom}" stroke="black"/>',
       f'<line x1="{left}" y1="{top}" x2="{left}" y2="{H - bottom}" stroke="black"/>',
       f'<text x="{(left + W - right) / 2}" y="{H - 12}" text-anchor="middle">T (evaluation sequence length)</text>',
       f'<text x="16" y="{(top + H - bottom) / 2}" transform="rotate(-90 16 {(top + H - bottom) / 2})" text-anchor="middle">val loss</text>']
for T in lengths:
    svg.append(f'<text x="{x(T)}" y="{H - bottom + 16}" text-anchor="middle">{T}</text>')
steps = 5
for k in range(steps + 1):
    v = lo + k * (hi - lo) / steps
    svg.append(f'<line x1="{left - 4}" y1="{y(v):.1f}" x2="{W - right}" y2="{y(v):.1f}" stroke="#e0e0e0"/>')
    svg.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
for n, (p, by_T) in enumerate(table.items()):
    c = colours.get(p, "black")
    points = " ".join(f"{x(T):.1f},{y(v):.1f}" for T, v in sorted(by_T.items()))
    svg.append(f'<polyline points="{points}" fill="none" stroke="{c}" stroke-width="2"/>')
    svg += [f'<circle cx="{x(T):.1f}" cy="{y(v):.1f}" r="3.5" fill="{c}"/>' for T, v in by_T.items()]
    svg.append(f'<rect x="{W - right + 20}" y="{top + 20 * n}" width="14" height="4" fill="{c}"/>')
    svg.append(f'<text x="{W - right + 40}" y="{top + 20 * n + 6}">{p}</text>')
svg.append("</svg>")
open(sys.argv[2], "w").write("\n".join(svg) + "\n")
PY
echo "wrote $out/extrapolation.csv and $out/extrapolation.svg"
