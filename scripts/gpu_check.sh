#!/usr/bin/env bash
# The GPU check: on a CUDA machine, in under 10 minutes, everything a GPU user relies on, ending in
# one table (docs/results.md keeps the table of each GPU it ran on).
#
#   bash scripts/gpu_check.sh            # from the repository root, with requirements installed
#
# 1. the tests that run on the GPU (tests/test_gpu.py: fused kernels == the formula, KV cache, TF32
#    setting, a bfloat16 run) and the model's; TESTS=tests runs the whole suite (minutes more: the
#    rest runs on the CPU, as CI does);
# 2. nanoGPT's baby GPT (configs/shakespeare_char_gpu.yaml, dtype auto: bfloat16 from Ampere on): time to val 1.47;
# 3. training tokens/s and MFU in float32 (TF32 off, then on), bfloat16, bfloat16 + torch.compile;
# 4. KV-cache decoding tokens/s (6x6x384, block 512), and the same weights through transformers;
#    then again with the decoding step compiled (sample.py --compile; its own stage and time limit);
# 5. a one-process torchrun run over NCCL;
# 6. the table, from what the stages left in $OUT (scripts/gpu_table.py; tests/test_bench.py checks it on CPU).
#
# Tiny shakespeare comes from $SHAKESPEARE (default ../shared/data/tinyshakespeare.txt; offline machines
# need a local copy). Results land in $OUT (default out/gpu_check). Stages that fail are marked in the
# table; the script goes on with the next. Each stage has a time limit, so the whole stays bounded.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
SHAKESPEARE=${SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
TESTS=${TESTS:-tests/test_gpu.py tests/test_model.py}
mkdir -p "$OUT"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "error: no CUDA device here: this check needs a GPU" >&2; exit 2; }
[ -f "$SHAKESPEARE" ] || { echo "error: no tiny shakespeare at $SHAKESPEARE: set SHAKESPEARE=path" >&2; exit 2; }
status() { echo "$1=$2" >> "$OUT/status"; }
: > "$OUT/status"
BENCH="python bench.py configs/shakespeare_char_gpu.yaml --set data.dataset=$SHAKESPEARE model.dropout=0"

echo "== 1. tests"
# shellcheck disable=SC2086  # TESTS is a list of paths
timeout 600 python -m pytest -q -x $TESTS 2>&1 | tee "$OUT/tests.txt" | tail -n 3
status tests "$(tail -n 1 "$OUT/tests.txt" | tr -d '=' | xargs)"

echo "== 2. baby GPT to val 1.47 (dtype auto)"
rm -rf "$OUT/baby"
timeout 300 python train.py configs/shakespeare_char_gpu.yaml --quiet --set data.dataset="$SHAKESPEARE" \
    train.out_dir="$OUT/baby" train.eval_interval=250 train.plot=never > "$OUT/baby.txt" 2>&1
status baby "exit $?"

echo "== 3. training speed per dtype"
timeout 120 $BENCH train.tf32=false --dtypes float32 --steps 20 --gen-tokens 0 --json "$OUT/fp32.json" > "$OUT/fp32.txt" 2>&1
status fp32 "exit $?"
timeout 180 $BENCH --dtypes float32,bfloat16 --steps 20 --gen-tokens 0 --json "$OUT/tf32_bf16.json" > "$OUT/tf32_bf16.txt" 2>&1
status tf32_bf16 "exit $?"
timeout 240 $BENCH --dtypes bfloat16 --steps 20 --gen-tokens 0 --compile --json "$OUT/compile.json" \
    > "$OUT/compile.txt" 2>&1
status compile "exit $?"

echo "== 4. decoding"
timeout 240 $BENCH --dtypes float32 --steps 0 --gen-tokens 500 --vs-hf --json "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
status decode "exit $?"
timeout 300 $BENCH --dtypes float32 --steps 0 --gen-tokens 500 --vs-hf --compile --json "$OUT/decode_compiled.json" \
    > "$OUT/decode_compiled.txt" 2>&1
status decode_compiled "exit $?"

echo "== 5. torchrun, NCCL, one process"
rm -rf "$OUT/ddp"
timeout 120 torchrun --standalone --nproc_per_node=1 train.py configs/shakespeare_char_gpu.yaml --quiet \
    --set data.dataset="$SHAKESPEARE" train.out_dir="$OUT/ddp" train.max_iters=50 train.eval_interval=50 \
    train.eval_iters=5 train.plot=never > "$OUT/ddp.txt" 2>&1
status ddp "exit $?"

python -m scripts.gpu_table "$OUT"
echo "the check took ${SECONDS} s"
