#!/usr/bin/env bash
# Reruns the measurements of docs/results.md (and docs/attention.md's ablation) that were made with
# it, one part after another (they compete for the CPU otherwise), writing logs and JSON into $OUT
# (default out/experiments); the other figures there are rerun by the commands written beside them.
# On 2 cores: default about 2 hours, ablation about 40 minutes, sweep about 100 (36 runs), bench
# about 40 (nearly all of it the 200-step loss comparison), jobs about 11; foundation trains the
# default and nanoGPT's recipe, attention two 500-step runs, speedrun three runs of about a minute.
#   bash scripts/experiments.sh [all | default | foundation | attention | ablation | sweep | jobs | bench | speedrun]
# One part, exactly as written here; none runs all; -h or --help prints this text. An empty or
# unknown part, or more than one, prints the usage line and exits 2 before anything is made.
# foundation, bench and speedrun read tiny shakespeare from SHAKESPEARE=PATH/tinyshakespeare.txt
# (unset: ../shared/data/tinyshakespeare.txt); they stop at once, naming SHAKESPEARE, without it.
# A relative SHAKESPEARE or OUT is a path from the folder the script is run from (the defaults: from
# the repository root). A log in OUT is replaced only once its command has succeeded: a rerun that
# fails or is refused leaves the earlier one whole. default, foundation and speedrun train into folders
# of their own (OUT/default_run, OUT/stories and OUT/shakespeare, OUT/speedrun) and never over an
# earlier run: to run one of them again, move or delete its folder (it is refused before any work). A
# second run of the script in the same OUT is refused while the first one runs.
set -euo pipefail
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the header above, without its comment marks
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
# the user's paths are from where they ran the script: made absolute before the cd to the repository
[[ -z ${SHAKESPEARE:-} || $SHAKESPEARE == /* ]] || SHAKESPEARE=$PWD/$SHAKESPEARE
[[ -z ${OUT:-} || $OUT == /* ]] || OUT=$PWD/$OUT
cd "$(dirname "$0")/.."
OUT=${OUT:-out/experiments}
SHAKESPEARE=${SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
parts="all default foundation attention ablation sweep jobs bench speedrun"

usage() {  # usage WHAT: the usage line, ending with what was given instead; exit 2
  echo "usage: bash scripts/experiments.sh [${parts// / | }] (one of them; none: all, one after another, for hours); not $1" >&2
  exit 2
}

logged() {  # logged FILE CMD...: CMD's output on the terminal and into FILE, which it replaces only once CMD
  # has succeeded: a refused or failed rerun leaves an earlier run's log whole (tee alone emptied it first)
  local file=$1 rc
  shift
  if "$@" | tee "$file.part"; then
    mv "$file.part" "$file"
  else
    rc=$?
    rm -f "$file.part"
    return $rc
  fi
}

yaml_string() {  # yaml_string TEXT: TEXT as one YAML single-quoted scalar, which --set reads as it is (unquoted,
  local q="'"      # a path with ' #' in it was cut there, one with ': ' read as a mapping)
  printf '%s' "$q${1//$q/$q$q}$q"
}

TEXT="data.dataset=$(yaml_string "$SHAKESPEARE")"  # the --set item of tiny shakespeare

is_part() {  # is_part WORD: WORD is exactly one of $parts (a piece of the list, 'default foundation', is not)
  local part
  for part in $parts; do [[ $1 == "$part" ]] && return 0; done
  return 1
}

# no argument means all; an empty one is refused (an unset variable, not a wish for hours of work)
[[ $# -le 1 ]] || usage "$# arguments"
what=${1-all}
is_part "$what" || usage "'$what'"
if [[ " all foundation bench speedrun " == *" $what "* && ! -f $SHAKESPEARE ]]; then
  echo "error: no tiny shakespeare at $SHAKESPEARE (part $what reads it): set SHAKESPEARE=PATH/tinyshakespeare.txt" >&2
  exit 2
fi
if ! why=$(mkdir -p "$OUT" 2>&1); then  # a file in the way, no permission: one line, before any work
  echo "error: cannot make the folder OUT=$OUT: ${why##*: }" >&2
  exit 2
fi
# one run at a time in OUT (flock(1), where there is one: Linux), held on the folder itself until the script
# and its commands end: a second one's refused part removed the first one's log as it was written
if command -v flock > /dev/null; then
  [[ -r $OUT ]] || { echo "error: cannot read the folder OUT=$OUT" >&2; exit 2; }
  exec 9< "$OUT"
  if ! flock -n 9; then
    echo "error: OUT=$OUT is in use by another scripts/experiments.sh (or gpu_check.sh): wait for it to end, or" \
         "choose another OUT" >&2
    exit 2
  fi
fi
# part ablation alone trains the default's 3 seeds where they are missing: a folder of them left unfinished
# (a stopped part default) would be refused by default_run with advice this script takes no flag for
if [[ $what == ablation && -e $OUT/default_run && ! -d $OUT/default_run/seed1339/run ]]; then
  echo "error: $OUT/default_run holds an unfinished run of part default (no seed1339/run), where part ablation" \
       "trains the seeds it lacks: move or delete it (or run part default to its end) to run the part" >&2
  exit 2
fi
# the parts whose scripts refuse to train over an earlier run (their message names their own --out-dir):
# refused here, before any part's work, naming the folder to move
declare -A own=([default]=default_run [foundation]="stories shakespeare" [speedrun]=speedrun)
for part in default foundation speedrun; do
  [[ $what == all || $what == "$part" ]] || continue
  for folder in ${own[$part]}; do
    if [[ -e $OUT/$folder ]]; then
      echo "error: $OUT/$folder holds an earlier run of part $part: move or delete it to run the part again" >&2
      exit 2
    fi
  done
done

if [[ $what == all || $what == default ]]; then
  # the default config over 3 seeds (probed), then the previous default over the same 3, wall times in one run
  logged "$OUT/default_run.txt" python -m scripts.default_run --seeds 3 --old-seeds 3 --out "$OUT/default_run"
fi

if [[ $what == all || $what == foundation ]]; then
  # the default config: wall time, then the share of 2,000 sampled words that occur in the corpus
  logged "$OUT/stories.json" python -m scripts.reproduce stories --out-dir "$OUT/stories"
  # nanoGPT's CPU recipe on tiny shakespeare
  logged "$OUT/shakespeare.json" python -m scripts.reproduce shakespeare --text "$SHAKESPEARE" --out-dir "$OUT/shakespeare"
fi

if [[ $what == all || $what == attention ]]; then
  # causal vs bidirectional: the default config for 500 steps with and without the mask (single runs),
  # then what each generates from the same prompt (the bidirectional model: refused, then --force)
  if [[ -f $OUT/stories/run/best.pt ]]; then  # the coreference probe on foundation's default model
    logged "$OUT/probe_default.txt" python probe.py "$OUT/stories/run"
  fi
  for causal in true false; do
    rm -rf "$OUT/causal_$causal"
    logged "$OUT/causal_$causal.txt" python train.py configs/stories.yaml --quiet --set model.causal=$causal \
        train.max_iters=500 train.out_dir="$(yaml_string "$OUT/causal_$causal")"
  done
  python sample.py "$OUT/causal_true" --prompt "Once upon a time" --max-new-tokens 40 --seed 1 >>"$OUT/causal_true.txt"
  python sample.py "$OUT/causal_false" --max-new-tokens 1 >>"$OUT/causal_false.txt" 2>&1 || true
  python sample.py "$OUT/causal_false" --force --prompt "Once upon a time" --max-new-tokens 40 --seed 1 \
      >>"$OUT/causal_false.txt" 2>&1
fi

if [[ $what == all || $what == ablation ]]; then
  # head ablation on the 3 seeds of the default (trained by `default` above, or here if missing)
  [[ -d "$OUT/default_run/seed1339/run" ]] || python -m scripts.default_run --seeds 3 --old-seeds 0 --out "$OUT/default_run"
  logged "$OUT/ablation.md" python -m scripts.ablation_table "$OUT"/default_run/seed*/run --stories 30 --out "$OUT/ablation"
fi

if [[ $what == all || $what == sweep ]]; then
  # heads x layers on the default at a fixed budget of 500 steps, 3 seeds each, every run probed for
  # coreference, two runs at a time (one thread each on 2 cores)
  logged "$OUT/heads_layers.txt" python sweep.py configs/stories.yaml --quiet --seeds 3 --probe --jobs 2 \
      --grid model.n_head=1,2,4,8 model.n_layer=1,2,4 --set train.max_iters=500 train.eval_interval=125 \
      --out "$OUT/heads_layers"
fi

if [[ $what == all || $what == jobs ]]; then
  # sweep.py --jobs 1 against --jobs 2: four 80-step runs of the default, in the order 1 2 2 1
  # (about 11 minutes); the data is prepared once, first
  J=(configs/stories.yaml --quiet --grid model.n_head=1,2,4,8 --set train.max_iters=80 train.eval_interval=80
     train.eval_iters=10 train.plot=never data.prepared_dir="$(yaml_string "$OUT/jobs_prepared")")
  python -m data.prepare configs/stories.yaml --set data.prepared_dir="$(yaml_string "$OUT/jobs_prepared")" > /dev/null
  # jobs.txt (this run's four timings) and jobs_round1.txt .. jobs_round4.txt (each sweep's output): in place
  # together once all four are done (a sweep writing into its log emptied an earlier run's first)
  rm -f "$OUT"/jobs*.txt.part
  round=0
  for jobs in 1 2 2 1; do
    round=$((round + 1))
    rm -rf "$OUT/jobs_sweep"
    start=$(date +%s.%N)
    python sweep.py "${J[@]}" --jobs $jobs --out "$OUT/jobs_sweep" > "$OUT/jobs_round$round.txt.part" ||
      { rc=$?; rm -f "$OUT"/jobs*.txt.part; exit $rc; }
    echo "--jobs $jobs: $(python -c "print(f'{$(date +%s.%N) - $start:.1f}')") s" | tee -a "$OUT/jobs.txt.part"
  done
  for part in "$OUT"/jobs*.txt.part; do
    mv "$part" "${part%.part}"
  done
fi

if [[ $what == all || $what == bench ]]; then
  # baby GPT training speed (float32 vs bfloat16) and generation with and without the KV cache
  logged "$OUT/bench_baby.txt" python bench.py configs/shakespeare_char_gpu.yaml --set "$TEXT" \
      train.device=cpu model.dropout=0 --steps 3 --attention --json "$OUT/bench_baby.json"
  # float32 vs bfloat16 loss after 200 steps (the slow part: ~40 minutes on 2 cores)
  logged "$OUT/bench_loss.txt" python bench.py configs/shakespeare_char_gpu.yaml --set "$TEXT" \
      train.device=cpu model.dropout=0 --steps 0 --gen-tokens 0 --loss-steps 200 --json "$OUT/bench_loss.json"
  # decoding and training with a busy process beside them; greedy decoding against transformers
  logged "$OUT/bench_under_load.txt" python bench.py configs/stories.yaml --steps 0 --gen-tokens 0 --dtypes float32 \
      --under-load --json "$OUT/bench_under_load.json"
  logged "$OUT/bench_vs_hf.txt" python bench.py configs/shakespeare_char.yaml --set "$TEXT" \
      --steps 0 --gen-tokens 500 --dtypes float32 --vs-hf --json "$OUT/bench_vs_hf.json"
fi

if [[ $what == all || $what == speedrun ]]; then
  # the speedrun config over 3 seeds (about a minute of training each)
  for seed in 1337 1338 1339; do
    logged "$OUT/speedrun_seed$seed.json" python -m scripts.reproduce shakespeare --text "$SHAKESPEARE" \
        --config configs/shakespeare_char_fast.yaml --out-dir "$OUT/speedrun/seed$seed" --set train.seed=$seed
  done
fi
