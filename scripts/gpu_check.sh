#!/usr/bin/env bash
# The GPU check: on a CUDA machine, in under 10 minutes, everything a GPU user relies on, ending in
# one table (docs/results.md keeps the table of each GPU it ran on).
#
#   bash scripts/gpu_check.sh              # from the repository root, with requirements.txt and
#                                          # requirements-dev.txt installed (transformers: stages 4 and 6)
#   REHEARSE=1 bash scripts/gpu_check.sh   # every stage on the CPU with a tiny model: checks this
#                                          # script itself where no GPU is at hand (a few minutes)
#   bash scripts/gpu_check.sh --help       # this text (it takes no other argument)
#
# 1. the tests that run on the GPU (tests/test_gpu.py: fused kernels == the formula, KV cache, TF32
#    setting, a bfloat16 run, an exact resume with dropout) and the model's; TESTS=tests runs the
#    whole suite (minutes more: the rest runs on the CPU, as CI does; give it BUDGET=900);
# 2. nanoGPT's baby GPT (configs/shakespeare_char_gpu.yaml, dtype auto: bfloat16 from Ampere on): time to val 1.47;
# 3. training tokens/s and MFU in float32 (TF32 off, then on), bfloat16, bfloat16 + torch.compile;
# 4. KV-cache decoding tokens/s (6x6x384, block 512), and the same weights through transformers;
# 5. a one-process torchrun run over NCCL (its process group starts and stops; one process runs no collective);
# 6. decoding again with the step compiled (sample.py --compile);
# 7. the table, from what the stages left in $OUT (scripts/gpu_table.py; tests/test_bench.py checks it on CPU).
#
# Tiny shakespeare comes from $SHAKESPEARE (default ../shared/data/tinyshakespeare.txt; offline machines
# need a local copy). Results land in $OUT (default out/gpu_check), each stage's output in
# $OUT/STAGE.txt. A relative SHAKESPEARE or OUT is a path from the folder the script is run from (the
# defaults: from the repository root). OUT is a new or empty folder, or an earlier check's: the check
# first deletes there what it writes (status, STAGE.txt, the bench stages' STAGE.json, the runs baby/
# and ddp/, folders of train.py's files) and nothing else; a folder that holds anything else (OUT=.
# or OUT=~) is refused, lest a file of the user's be taken for an earlier check's.
#
# Each stage has its own time limit and all of them share a budget ($BUDGET seconds, default 540):
# a stage gets at most what is left, and one that no longer fits is skipped. A stage that fails,
# times out or is skipped is marked in the table; the script goes on with the next.
#
# Exit code: 0 when every stage that ran passed (one skipped for lack of budget is no failure, only
# a row that says so); 1 when one failed or ran out of time (the table still prints, then one line
# naming them) or the table itself failed; 2, with one line and before any stage, for a bad setting: BUDGET not 15 to 86400
# seconds, REHEARSE not 0 or 1 (empty: 0), a PYTHON that cannot import torch or transformers, no tiny shakespeare,
# an OUT that cannot be made or written, that holds what the check does not write or that another check
# is using, or no GPU without REHEARSE=1.
#
# Ctrl-C, kill (SIGTERM) or a hang-up (SIGHUP) stops the running stage, all of its processes, marks
# it `interrupted` in $OUT/status (its STAGE.txt holds what it printed until then), prints the one
# line `interrupted` and exits 130 (143, 129).
set -uo pipefail
if [[ $# -gt 0 ]]; then  # settings are environment variables: an argument was ignored (a whole check ran)
  if [[ $1 == -h || $1 == --help ]]; then  # the header above, without its comment marks
    sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 0
  fi
  echo "error: gpu_check.sh takes no arguments, not '$1': its settings are environment variables (OUT=DIR," \
       "SHAKESPEARE=FILE, BUDGET=S, REHEARSE=1, TESTS=..., PYTHON=...); --help says more" >&2
  exit 2
fi
# the user's paths are from where they ran the script: made absolute before the cd to the repository
[[ -z ${SHAKESPEARE:-} || $SHAKESPEARE == /* ]] || SHAKESPEARE=$PWD/$SHAKESPEARE
[[ -z ${OUT:-} || $OUT == /* ]] || OUT=$PWD/$OUT
cd "$(dirname "$0")/.."
die() { echo "error: $*" >&2; exit 2; }
yaml_string() {  # yaml_string TEXT: TEXT as one YAML single-quoted scalar, which --set reads as it is (unquoted,
  local q="'"      # a path with ' #' in it was cut there, one with ': ' read as a mapping)
  printf '%s' "$q${1//$q/$q$q}$q"
}
# the Python that holds torch: `python`, else `python3` (machines with only the latter), or $PYTHON
PY=${PYTHON:-$(command -v python || command -v python3)}
[ -n "$PY" ] || die "no python or python3 on PATH (set PYTHON=path)"
OUT=${OUT:-out/gpu_check}
SHAKESPEARE=${SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
BUDGET=${BUDGET:-540}
REHEARSE=${REHEARSE:-0}

# check_budget: whole seconds, 15 (what a stage needs to start) to a day. Leading zeros go (bash arithmetic
# reads 010 as octal) and the length is bounded first (9223372036854775808 wraps to a negative there).
check_budget() {
    [[ $BUDGET =~ ^[0-9]+$ ]] || die "BUDGET=$BUDGET must be a whole number of seconds"
    local seconds=${BUDGET#"${BUDGET%%[!0]*}"}
    if [ -z "$seconds" ] || [ ${#seconds} -gt 5 ] || [ "$seconds" -gt 86400 ] || [ "$seconds" -lt 15 ]; then
        die "BUDGET=$BUDGET is out of range: 15 to 86400 seconds (a stage needs 15 s to start; default 540)"
    fi
    BUDGET=$seconds
}

# check_python: $PY runs and imports torch and transformers; else every stage failed (exit 127) under an exit 0, and
# without REHEARSE the missing command was blamed on a missing GPU
check_python() {
    local who="PYTHON=$PY"
    [ -n "${PYTHON:-}" ] || who="$PY (found on PATH; set PYTHON=path)"
    command -v "$PY" > /dev/null || die "$who is not a command that runs here"
    "$PY" -c "import torch" 2> /dev/null \
        || die "$who cannot import torch: set PYTHON to the Python that holds the requirements"
    # (stages 4 and 6 measure against transformers' generate: without it both failed after minutes)
    "$PY" -c "import transformers" 2> /dev/null \
        || die "$who cannot import transformers, which stages 4 and 6 compare decoding with: pip install -r requirements-dev.txt"
}

# What the check writes in OUT, and all it ever deletes there: each stage's output, the bench
# stages' JSON, status, and two training runs' folders holding what train.py writes in a run
# (tinygpt/runs.py; the check's runs draw no loss.png, but a user's rerun might; a tensorboard/ folder is
# never the check's, and is refused as the user's). Anything else in OUT may be the user's (OUT=. is the
# checkout, OUT=~ the home folder).
STAGES=(tests baby fp32 tf32_bf16 compile decode ddp decode_compiled)
OUT_FILES="status ${STAGES[*]/%/.txt} fp32.json tf32_bf16.json compile.json decode.json decode_compiled.json"
RUNS="baby ddp"
RUN_FILES="config.yaml ckpt.pt best.pt metrics.csv loss.png .lock"

# written LIST NAME: NAME is one of the words of LIST, or the temp file of one that a killed writer
# left, `.NAME.PID.XXXXXX.tmp` (tinygpt/checkpoint.py's atomic writes; the next write removes it), or
# its lock, `.NAME.lock` (bench.py --json's, tinygpt/runs.py; a stage killed by `timeout -k` leaves it)
written() {
    local name=$2
    if [[ $name == .*.*.*.tmp ]]; then
        name=${name#.}
        name=${name%.*.*.tmp}
    elif [[ $name == .?*.lock ]]; then
        name=${name#.}
        name=${name%.lock}
    fi
    [[ " $1 " == *" $name "* ]]
}

# ours PATH: PATH, in OUT, is one of the check's, of the kind it writes: a file of OUT_FILES, or a
# folder of RUNS that holds train.py's files only
ours() {
    local name=${1##*/} entry
    if written "$RUNS" "$name"; then
        [ -d "$1" ] || return 1
        for entry in "$1"/* "$1"/.[!.]* "$1"/..?*; do
            [ -e "$entry" ] || [ -L "$entry" ] || continue  # a pattern that matched nothing
            [ -f "$entry" ] && written "$RUN_FILES" "${entry##*/}" || return 1
        done
    else
        [ -f "$1" ] && written "$OUT_FILES" "$name"
    fi
}

# prepare_out: OUT made and writable, an earlier check's figures gone (never passed off as this
# one's). An OUT that holds anything but the check's own is refused, whole, with nothing deleted.
prepare_out() {
    local why path others=() shown
    why=$(mkdir -p "$OUT" 2>&1) || die "cannot make the folder OUT=$OUT: ${why##*: }"
    # one check at a time in OUT (flock(1), where there is one: Linux), held on the folder itself until
    # the check and its stages end: a second one's clearing deleted the first one's files as it wrote them
    if command -v flock > /dev/null; then
        [ -r "$OUT" ] || die "cannot read the folder OUT=$OUT"
        exec 9< "$OUT"
        flock -n 9 || die "OUT=$OUT is in use by another check (or scripts/experiments.sh): wait for it to end, or choose another OUT"
    fi
    for path in "$OUT"/* "$OUT"/.[!.]* "$OUT"/..?*; do
        [ -e "$path" ] || [ -L "$path" ] || continue  # a pattern that matched nothing
        ours "$path" || others+=("${path##*/}")
    done
    if [ ${#others[@]} -gt 0 ]; then
        shown=$(printf '%s, ' "${others[@]:0:3}")
        shown=${shown%, }
        [ ${#others[@]} -gt 3 ] && shown+=" and $((${#others[@]} - 3)) more"
        die "OUT=$OUT holds what no earlier check wrote ($shown), and the check clears its OUT: choose a new or empty folder"
    fi
    # (status removed first: a symlink there would have a file elsewhere emptied)
    rm -f "$OUT/status" 2> /dev/null
    ( : > "$OUT/status" ) 2> /dev/null || die "cannot write in the folder OUT=$OUT"
    for path in $OUT_FILES $RUNS; do
        [ "$path" = status ] || rm -rf "${OUT:?}/$path" "${OUT:?}/.$path.lock"
    done
}

# on_signal NUMBER: Ctrl-C, SIGTERM or SIGHUP. The stage running, if any, is stopped (it is in a
# process group of its own, where the terminal's Ctrl-C does not reach), marked interrupted; then
# the one line and 128 + NUMBER. `running` names the stage from just before it starts until it has
# ended; `$!` is its `timeout` once started (it differs from `ended`, the pid of the stage before).
running='' ended=''
on_signal() {
    trap '' INT TERM HUP  # a second Ctrl-C while the stage stops does not cut the stop short
    if [ -n "$running" ] && [ "${!:-}" != "$ended" ]; then
        stop_stage "$!"
        status "$running" interrupted
    fi
    echo interrupted >&2
    exit $((128 + $1))
}
trap 'on_signal 2' INT
trap 'on_signal 15' TERM
trap 'on_signal 1' HUP

# stop_stage PID: SIGTERM to the stage's `timeout` (PID, also its process group's id), which passes
# it to the whole group and SIGKILLs the group 10 s later (-k 10) if its command is still there; then
# what the command started and has not yet ended (timeout waits for its command only) gets the same
# 10 s, then SIGKILL, so that nothing of the stage is left running.
stop_stage() {
    local tries=0
    kill -TERM "$1" 2> /dev/null
    wait "$1" 2> /dev/null
    while group_alive "$1" && [ $((tries += 1)) -le 100 ]; do sleep 0.1; done
    kill -KILL -- "-$1" 2> /dev/null
}

# group_alive PGID: a process of the process group PGID has not ended. (Not `kill -0 -- -PGID`: a
# zombie counts there, and some containers' init is slow to collect an orphan's.)
group_alive() {
    local stat line state pgrp
    for stat in /proc/[0-9]*/stat; do
        # (ended meanwhile; the 2> comes first: redirections apply left to right, and the < fails)
        read -r line 2> /dev/null < "$stat" || continue
        line=${line##*) }  # what follows the command's name, which may hold spaces or parentheses
        read -r state _ pgrp _ <<< "$line"
        [ "$pgrp" = "$1" ] && [ "$state" != Z ] && return 0
    done
    return 1
}

case $REHEARSE in
    0|1) ;;
    *) die "REHEARSE=$REHEARSE must be 1 (every stage on the CPU with a tiny model) or 0 (the check on a GPU)" ;;
esac
check_budget
check_python
TESTS_LIMIT=240
[ -n "${TESTS:-}" ] && TESTS_LIMIT=600  # a list of one's own, maybe the whole suite
if [ "$REHEARSE" = 1 ]; then  # the same commands, on the CPU, at a size that takes seconds
    TESTS=${TESTS:-tests/test_model.py}
    SMALL="train.device=cpu model.n_layer=2 model.n_head=2 model.n_embd=64 model.block_size=64 train.batch_size=8 train.eval_iters=5"
    BABY="train.max_iters=100 train.eval_interval=50"
    GEN="--gen-layers 2 --gen-heads 2 --gen-embd 64 --gen-block 128 --gen-tokens 100"
    DEVICE="cpu: a rehearsal with a tiny model, not a measurement"
    BACKEND="gloo, the CPU's"
else
    TESTS=${TESTS:-tests/test_gpu.py tests/test_model.py}
    SMALL="" BABY="" GEN="--gen-tokens 500" DEVICE="" BACKEND="NCCL"
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
        || die "no CUDA device here: this check needs a GPU (REHEARSE=1 runs it on the CPU)"
fi
[ -f "$SHAKESPEARE" ] || die "no tiny shakespeare at $SHAKESPEARE: set SHAKESPEARE=path"
# the budget counts from the start: the checks above (torch's import, the GPU's) spent some of it
[ $((BUDGET - SECONDS)) -ge 15 ] || die "BUDGET=$BUDGET leaves $((BUDGET - SECONDS)) s after the checks (${SECONDS} s)," \
    "and a stage needs 15 s to start: give more"
prepare_out
status() { echo "$1=$2" >> "$OUT/status"; }

# stage NAME LIMIT COMMAND...: COMMAND under min(LIMIT, what is left of the budget), its output in
# $OUT/NAME.txt, "exit N" (124: out of time) or "skipped" in $OUT/status; NAME joins `failed` unless
# it passed or was skipped. `timeout` puts COMMAND in a process group of its own, so that a timeout
# ends it whole (pytest's workers, torchrun's); it runs in the background only so that bash, which
# runs no trap until a foreground command ends, can stop it on a signal (on_signal).
failed=()
stage() {
    local name=$1 limit=$2 left=$((BUDGET - SECONDS))
    shift 2
    if [ "$left" -lt 15 ]; then
        status "$name" "skipped: the ${BUDGET} s budget was spent"
        echo "   skipped: the ${BUDGET} s budget was spent"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    running=$name
    timeout -k 10 "$limit" "$@" > "$OUT/$name.txt" 2>&1 &
    wait "$!"
    local rc=$?
    ended=$! running=''
    status "$name" "exit $rc"
    [ "$rc" = 0 ] || failed+=("$name")
    echo "   exit $rc after ${SECONDS} s"
}

# shellcheck disable=SC2086  # TESTS, SMALL, BABY and GEN are lists of words
TEXT="data.dataset=$(yaml_string "$SHAKESPEARE")"  # the --set item of tiny shakespeare
BENCH=("$PY" bench.py configs/shakespeare_char_gpu.yaml --set "$TEXT" model.dropout=0 $SMALL)
TRAIN=("$PY" train.py configs/shakespeare_char_gpu.yaml --quiet --set "$TEXT" $SMALL)

echo "== 1. tests: $TESTS"
# shellcheck disable=SC2086
stage tests "$TESTS_LIMIT" "$PY" -m pytest -q -x -p no:cacheprovider $TESTS
summary=$(tail -n 1 "$OUT/tests.txt" 2> /dev/null | grep -E "passed|failed|error|skipped" | tr -d '=' | xargs)
[ -n "$summary" ] && status tests "$summary"

echo "== 2. baby GPT to val 1.47 (dtype auto)"
# shellcheck disable=SC2086
stage baby 300 "${TRAIN[@]}" train.out_dir="$(yaml_string "$OUT/baby")" train.eval_interval=250 train.plot=never $BABY

echo "== 3. training speed per dtype"
stage fp32 90 "${BENCH[@]}" train.tf32=false --dtypes float32 --steps 20 --gen-tokens 0 --json "$OUT/fp32.json"
stage tf32_bf16 120 "${BENCH[@]}" --dtypes float32,bfloat16 --steps 20 --gen-tokens 0 --json "$OUT/tf32_bf16.json"
stage compile 180 "${BENCH[@]}" --dtypes bfloat16 --steps 20 --gen-tokens 0 --compile --json "$OUT/compile.json"

echo "== 4. decoding, and the same weights through transformers"
# shellcheck disable=SC2086
stage decode 180 "${BENCH[@]}" --dtypes float32 --steps 0 $GEN --vs-hf --json "$OUT/decode.json"

echo "== 5. torchrun, $BACKEND, one process (no collective: the process group starts and stops)"
stage ddp 120 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 "${TRAIN[@]:1}" \
    train.out_dir="$(yaml_string "$OUT/ddp")" train.max_iters=50 train.eval_interval=50 train.eval_iters=5 \
    train.plot=never

echo "== 6. decoding with the step compiled"
# shellcheck disable=SC2086
stage decode_compiled 240 "${BENCH[@]}" --dtypes float32 --steps 0 $GEN --vs-hf --compile \
    --json "$OUT/decode_compiled.json"

"$PY" -m scripts.gpu_table "$OUT" ${DEVICE:+--device "$DEVICE"}
table=$?
echo "the check took ${SECONDS} s"
if [ ${#failed[@]} -gt 0 ]; then  # the table shows how each failed; this line is for the exit code's reader
    echo "error: ${#failed[@]} stage(s) failed: ${failed[*]} (each one's output: $OUT/STAGE.txt)" >&2
    exit 1
fi
[ "$table" = 0 ] || { echo "error: the table failed (scripts.gpu_table, exit $table)" >&2; exit 1; }
