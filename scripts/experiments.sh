#!/usr/bin/env bash
# Reruns every measurement quoted in the README, one after another (they compete for the CPU
# otherwise), writing logs and JSON into $OUT (default out/experiments). About an hour on 2 cores.
#   bash scripts/experiments.sh [all | foundation | attention | ablation | sweep | bench | speedrun]
# Tiny shakespeare is read from $SHAKESPEARE (default ../shared/data/tinyshakespeare.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/experiments}
SHAKESPEARE=${SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
what=${1:-all}
mkdir -p "$OUT"

if [[ $what == all || $what == foundation ]]; then
  # the default config: wall time, then the share of 2,000 sampled words that occur in the corpus
  python -m scripts.reproduce stories --out-dir "$OUT/stories" | tee "$OUT/stories.json"
  # nanoGPT's CPU recipe on tiny shakespeare
  python -m scripts.reproduce shakespeare --text "$SHAKESPEARE" --out-dir "$OUT/shakespeare" | tee "$OUT/shakespeare.json"
fi

if [[ $what == all || $what == attention ]]; then
  # the coreference probe on the default model, and the bidirectional experiment
  python probe.py "$OUT/stories/run" | tee "$OUT/probe_default.txt"
  rm -rf "$OUT/bidirectional"
  python train.py configs/stories.yaml --quiet --set model.causal=false train.max_iters=500 \
      train.out_dir="$OUT/bidirectional" | tee "$OUT/bidirectional.txt"
  python sample.py "$OUT/bidirectional" --max-new-tokens 1 >>"$OUT/bidirectional.txt" 2>&1 || true
  python sample.py "$OUT/bidirectional" --force --max-new-tokens 200 --seed 1 >>"$OUT/bidirectional.txt" 2>&1
fi

if [[ $what == all || $what == ablation ]]; then
  # head ablation on the default config over 3 training seeds (docs/attention.md)
  mkdir -p "$OUT/ablation"
  python sweep.py configs/stories.yaml --quiet --grid train.seed=1337,1338,1339 --out "$OUT/ablation" \
      | tee "$OUT/ablation/sweep.txt"
  python -m scripts.ablation_table "$OUT"/ablation/seed=* --out "$OUT/ablation" | tee "$OUT/ablation/table.md"
fi

if [[ $what == all || $what == sweep ]]; then
  # head and layer counts at a fixed budget (1,500 steps: half the default), each probed for coreference
  for grid in "model.n_head=1,2,4,8" "model.n_layer=1,2,4"; do
    name=${grid%%=*}; name=${name#model.}
    python sweep.py configs/stories.yaml --quiet --grid "$grid" --set train.max_iters=1500 \
        --out "$OUT/sweep_$name" | tee "$OUT/sweep_$name.txt"
    for run in "$OUT/sweep_$name"/*=*/; do
      python probe.py "$run" | tail -n 1 | sed "s|^|$(basename "$run") |" >>"$OUT/sweep_${name}_probe.txt"
    done
  done
fi

if [[ $what == all || $what == bench ]]; then
  # baby GPT training speed (float32 vs bfloat16) and generation with and without the KV cache
  python bench.py configs/shakespeare_char_gpu.yaml --set data.dataset="$SHAKESPEARE" train.device=cpu \
      model.dropout=0 --steps 3 --attention --json "$OUT/bench_baby.json" | tee "$OUT/bench_baby.txt"
  # float32 vs bfloat16 loss after 200 steps (the slow part: ~40 minutes on 2 cores)
  python bench.py configs/shakespeare_char_gpu.yaml --set data.dataset="$SHAKESPEARE" train.device=cpu \
      model.dropout=0 --steps 0 --gen-tokens 0 --loss-steps 200 --json "$OUT/bench_loss.json" | tee "$OUT/bench_loss.txt"
fi

if [[ $what == all || $what == speedrun ]]; then
  python -m scripts.reproduce shakespeare --text "$SHAKESPEARE" --config configs/shakespeare_char_fast.yaml \
      --out-dir "$OUT/speedrun" | tee "$OUT/speedrun.json"
fi
