#!/usr/bin/env bash
# cacheagent.Loader against PyTorch's DataLoader, warm, in a PyTorch loop
# (issue target: >= 10x on 1 KiB samples, >= 3x on 150 KB, hand-off <= 20 us
# per batch, zero copies). Prints a markdown table.
#
#   bench/pyloader.sh [loader,torch|torch,loader]   # which runs first (default loader,torch)
#
# Each size is one bench/pyloader_vs_torch.py run: its own emulator,
# daemon and /dev/shm copy of the shards, all removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
order=${1:-loader,torch}
py=/usr/bin/python3 # Debian's, with python3-torch; not the pyenv one on PATH
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "## run $(date -u +%FT%TZ), order $order, $(nproc) cores, $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" bench/pyloader_vs_torch.py --order "$order" --shards 64 --rows 8192 --sample-bytes 1024 --batch 256 \
	--target 10 >"$work/small.json"
"$py" bench/pyloader_vs_torch.py --order "$order" --shards 16 --rows 256 --sample-bytes 150528 --batch 64 --epochs 5 \
	--target 3 >"$work/big.json"
"$py" - "$work" <<'PY'
import json, sys
w = sys.argv[1]
print()
print("| samples | batch | Loader warm samples/s | PyTorch DataLoader warm samples/s | ratio | target "
      "| hand-off median / p99 / mean (batches) | zero copies (batches checked) | Loader cold epoch |")
print("|---|---|---|---|---|---|---|---|---|")
for name, label in (("small", "1 KiB"), ("big", "150 KB (150528 B)")):
    r = json.load(open(f"{w}/{name}.json"))
    lo, t = r["loader"], r["torch"]
    print(f"| {label} × {r['samples']} | {r['batch']} | {lo['samples_per_sec']:,.0f} | {t['samples_per_sec']:,.0f} "
          f"| {r['ratio']:.1f}x | ≥ {r['target']:g}x: {'met' if r['met'] else 'MISSED'} "
          f"| {lo['handoff_median_us']:.1f} / {lo['handoff_p99_us']:.1f} / {lo['handoff_mean_us']:.1f} µs "
          f"({lo['handoff_batches']}) | asserted ({lo['batches_checked']}) | {lo['cold_samples_per_sec']:,.0f} |")
PY
