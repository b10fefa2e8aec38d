#!/usr/bin/env bash
# Run a command as a container with limits would: in a new cgroup allowed CPUS cores' worth of CPU time
# and MEMORY_MB of memory (0 = no limit), as `docker run --cpus=CPUS --memory=MEMORY_MBm` does.
#
#   sudo bash scripts/in_cgroup.sh 1 0 python bench.py configs/stories.yaml --steps 0 --gen-tokens 0 --under-load
#   sudo bash scripts/in_cgroup.sh 0 2048 python train.py configs/stories.yaml
#
# Needs root (or a delegated cgroup) and Linux cgroups, v1 or v2 (on v2 it enables the cpu and memory
# controllers for the root's children, as container runtimes do); where it cannot make the cgroup it
# exits 77 and leaves none behind. The cgroup is removed when the command ends; its exit code is ours.
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 CPUS MEMORY_MB COMMAND [ARG ...]" >&2
  exit 2
fi
CPUS=$1 MEMORY_MB=$2
shift 2
if ! [[ $CPUS =~ ^[0-9]+(\.[0-9]+)?$ && $MEMORY_MB =~ ^[0-9]+$ ]]; then
  echo "$0: CPUS must be a number of cores (e.g. 1 or 1.5) and MEMORY_MB a whole number, 0 for no limit" >&2
  exit 2
fi
ROOT=/sys/fs/cgroup
NAME=tinygpt-limits-$$
QUOTA=$(awk -v c="$CPUS" 'BEGIN { printf "%d", c * 100000 + 0.5 }')  # microseconds per 100 ms period
made=()
trap 'for d in "${made[@]}"; do rmdir "$d" 2>/dev/null; done' EXIT

group() {  # group FOLDER FILE VALUE: make FOLDER/$NAME (once) and write VALUE to its FILE
  if [ ! -d "$1/$NAME" ]; then
    mkdir "$1/$NAME" 2>/dev/null || { echo "cannot make a cgroup under $1 (root needed)" >&2; exit 77; }
    made+=("$1/$NAME")
  fi
  echo "$3" > "$1/$NAME/$2" 2>/dev/null || { echo "cannot set $1/$NAME/$2" >&2; exit 77; }
}

if [ -f $ROOT/cgroup.controllers ]; then  # cgroup v2: one group holds both limits
  for c in cpu memory; do echo "+$c" > $ROOT/cgroup.subtree_control 2>/dev/null; done
  [ "$CPUS" != 0 ] && group $ROOT cpu.max "$QUOTA 100000"
  [ "$MEMORY_MB" != 0 ] && group $ROOT memory.max $((MEMORY_MB * 1024 * 1024))
  dirs=($ROOT)
else  # cgroup v1: a group in each controller's hierarchy
  [ "$CPUS" != 0 ] && group $ROOT/cpu cpu.cfs_quota_us "$QUOTA"
  [ "$MEMORY_MB" != 0 ] && group $ROOT/memory memory.limit_in_bytes $((MEMORY_MB * 1024 * 1024))
  dirs=($ROOT/cpu $ROOT/memory)
fi
# the command runs in a subshell that joins the groups first; this shell stays outside to remove them
(for d in "${dirs[@]}"; do [ -d "$d/$NAME" ] && { echo $BASHPID > "$d/$NAME/cgroup.procs" || exit 77; }; done
 exec "$@")
