#!/usr/bin/env bash
# The GPU check: on a CUDA machine, in under 10 minutes, everything a GPU user relies on, ending in
# one table (docs/results.md keeps the table of each GPU it ran on).
#
#   bash scripts/gpu_check.sh            # from the repository root, with requirements installed
#
# 1. the test suite, GPU tests included (tests/test_gpu.py: fused kernels == the formula, KV cache,
#    TF32 setting, a bfloat16 run);
# 2. nanoGPT's baby GPT (configs/shakespeare_char_gpu.yaml, bfloat16): time to nanoGPT's val loss 1.47;
# 3. training tokens/s and MFU in float32 (TF32 off, then on), bfloat16, bfloat16 + torch.compile;
# 4. KV-cache decoding tokens/s (6x6x384, block 512), and the same weights through transformers;
# 5. a one-process torchrun run over NCCL.
#
# Tiny shakespeare comes from $SHAKESPEARE (default ../shared/data/tinyshakespeare.txt; offline machines
# need a local copy). Results land in $OUT (default out/gpu_check). Stages that fail are marked in the
# table; the script goes on with the next.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
SHAKESPEARE=${SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
mkdir -p "$OUT"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "error: no CUDA device here: this check needs a GPU" >&2; exit 2; }
[ -f "$SHAKESPEARE" ] || { echo "error: no tiny shakespeare at $SHAKESPEARE: set SHAKESPEARE=path" >&2; exit 2; }
status() { echo "$1=$2" >> "$OUT/status"; }
: > "$OUT/status"
BENCH="python bench.py configs/shakespeare_char_gpu.yaml --set data.dataset=$SHAKESPEARE model.dropout=0"

echo "== 1. tests"
python -m pytest -q -x 2>&1 | tee "$OUT/tests.txt" | tail -n 3
status tests "$(tail -n 1 "$OUT/tests.txt" | tr -d '=' | xargs)"

echo "== 2. baby GPT to val 1.47 (bfloat16)"
rm -rf "$OUT/baby"
timeout 300 python train.py configs/shakespeare_char_gpu.yaml --quiet --set data.dataset="$SHAKESPEARE" \
    train.out_dir="$OUT/baby" train.eval_interval=250 train.plot=never > "$OUT/baby.txt" 2>&1
status baby "exit $?"

echo "== 3. training speed per dtype"
$BENCH train.tf32=false --dtypes float32 --steps 20 --gen-tokens 0 --json "$OUT/fp32.json" > "$OUT/fp32.txt" 2>&1
status fp32 "exit $?"
$BENCH --dtypes float32,bfloat16 --steps 20 --gen-tokens 0 --json "$OUT/tf32_bf16.json" > "$OUT/tf32_bf16.txt" 2>&1
status tf32_bf16 "exit $?"
timeout 240 $BENCH --dtypes bfloat16 --steps 20 --gen-tokens 0 --compile --json "$OUT/compile.json" \
    > "$OUT/compile.txt" 2>&1
status compile "exit $?"

echo "== 4. decoding"
$BENCH --dtypes float32 --steps 0 --gen-tokens 500 --vs-hf --json "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
status decode "exit $?"

echo "== 5. torchrun, NCCL, one process"
rm -rf "$OUT/ddp"
timeout 120 torchrun --standalone --nproc_per_node=1 train.py configs/shakespeare_char_gpu.yaml --quiet \
    --set data.dataset="$SHAKESPEARE" train.out_dir="$OUT/ddp" train.max_iters=50 train.eval_interval=50 \
    train.eval_iters=5 train.plot=never > "$OUT/ddp.txt" 2>&1
status ddp "exit $?"

python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
status = dict(line.split("=", 1) for line in (out / "status").read_text().splitlines())
def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}
rows = []
import torch
rows.append(("device", torch.cuda.get_device_name(0) + f", torch {torch.__version__}"))
rows.append(("test suite", status.get("tests", "?")))
from tinygpt.runs import read_metrics
metrics = read_metrics(out / "baby") if (out / "baby" / "metrics.csv").is_file() else []
hit = next((r for r in metrics if r["val_loss"] is not None and r["val_loss"] <= 1.47), None)
best = min((r["val_loss"] for r in metrics if r["val_loss"] is not None), default=None)
rows.append(("baby GPT: time to val 1.47", f"{hit['elapsed_s']:.0f} s (step {hit['step']:.0f})" if hit else
             f"not reached (best {best}; {status.get('baby')})"))
for name, key, label in (("fp32", "float32", "float32, TF32 off"), ("tf32_bf16", "float32", "float32, TF32 on"),
                         ("tf32_bf16", "bfloat16", "bfloat16"), ("compile", "bfloat16", "bfloat16 + torch.compile")):
    r = load(name).get("train", {}).get(key)
    rows.append((f"training, {label}", f"{r['tokens_per_s']:,.0f} tok/s, MFU {r['mfu']:.0%}" if r else
                 f"failed ({status.get(name)})"))
d = load("decode")
g, h = d.get("generate"), d.get("vs_hf")
rows.append(("decoding 6x6x384, KV cache", f"{g['cached_tokens_per_s']:,.0f} tok/s ({g['speedup']:.1f}x no cache)" if g else
             f"failed ({status.get('decode')})"))
if h:
    rows.append(("  vs transformers generate", f"{h['ratio']:.2f}x ({h['transformers_tokens_per_s']:,.0f} tok/s), "
                 f"same tokens: {h['same_tokens']}; bandwidth limit {h['bandwidth_limit_tokens_per_s']:,.0f} tok/s"))
rows.append(("torchrun, 1 process, NCCL", "ok" if status.get("ddp") == "exit 0" else f"failed ({status.get('ddp')})"))
width = max(len(k) for k, _ in rows)
print("\n| check | result |\n| --- | --- |")
for k, v in rows:
    print(f"| {k} | {v} |")
PY
