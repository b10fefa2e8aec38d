#!/usr/bin/env bash
# Run a command as a container with limits would: in a new cgroup allowed CPUS cores' worth of CPU time
# and MEMORY_MB of memory (0 = no limit), as `docker run --cpus=CPUS --memory=MEMORY_MBm` does.
#
#   sudo bash scripts/in_cgroup.sh 1 0 python bench.py configs/stories.yaml --steps 0 --gen-tokens 0 --under-load
#   sudo bash scripts/in_cgroup.sh 0 2048 python train.py configs/stories.yaml
#
# CPUS is 0 or from 0.01 (the kernel's least quota, 1 ms per 100 ms) to the cores this process may
# use; MEMORY_MB is 0 or a whole number from 6 (docker's least) to the machine's memory. Any other
# value: one line naming it, exit 2, nothing made or run.
# Needs root (or a delegated cgroup) and Linux cgroups, v1 or v2. On v1 the new cgroup is made inside this
# process's own, so a limit around the caller (a container's) still holds; on v2, where a cgroup holding
# processes cannot hand limits to children, under the root (it enables the cpu and memory controllers for
# the root's children, as container runtimes do). Where it cannot make the cgroup it exits 77 and leaves
# none behind. The cgroup is removed when the command ends; its exit code is ours
# (a command killed by SIGKILL, as the kernel kills one over MEMORY_MB, is reported in one line).
# Stopping: Ctrl-C and a hang-up reach the command from the terminal, as if it ran alone; SIGTERM to
# this script (kill PID) is passed on to it. Either way the script waits for the command to end
# (a tinygpt command prints `interrupted`, exit 130, 143 or 129), then removes the cgroup.
set -uo pipefail
if [ "${1-}" = -h ] || [ "${1-}" = --help ]; then  # the header above, without its comment marks
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
if [ $# -lt 3 ]; then
  echo "usage: $0 CPUS MEMORY_MB COMMAND [ARG ...]" >&2
  exit 2
fi
CPUS=$1 MEMORY_MB=$2
shift 2

die() { echo "error: $*" >&2; exit 2; }

# check_cpus: refuse a CPUS the kernel or the machine cannot honour; set QUOTA, the microseconds per
# 100 ms period (0: no limit). awk reads CPUS, as bash arithmetic has no fractions.
check_cpus() {
  local cores
  cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # (GNU nproc obeys those: the machine's cores)
  [[ $CPUS =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "CPUS=$CPUS must be a number of cores (e.g. 1 or 1.5), 0 for no limit"
  if awk -v c="$CPUS" 'BEGIN { exit !(c == 0) }'; then  # 0, 00, 0.0: no limit
    QUOTA=0
  elif awk -v c="$CPUS" -v n="$cores" 'BEGIN { exit !(c >= 0.01 && c <= n) }'; then
    QUOTA=$(awk -v c="$CPUS" 'BEGIN { printf "%d", c * 100000 + 0.5 }')
  else
    die "CPUS=$CPUS is out of range: from 0.01 to $cores (the cores here), or 0 for no limit"
  fi
}

# check_memory: refuse a MEMORY_MB outside 0 or 6..the machine's memory; set BYTES (0: no limit).
check_memory() {
  local mb total_mb
  [[ $MEMORY_MB =~ ^[0-9]+$ ]] || die "MEMORY_MB=$MEMORY_MB must be a whole number of megabytes, 0 for no limit"
  # leading zeros off (bash arithmetic reads 010 as octal), and a length bound (20 digits wrap)
  mb=${MEMORY_MB#"${MEMORY_MB%%[!0]*}"}
  mb=${mb:-0}
  total_mb=$(( $(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) / 1024 ))
  if [ "$mb" = 0 ]; then
    BYTES=0
  elif [ ${#mb} -le 12 ] && (( mb >= 6 && mb <= total_mb )); then
    BYTES=$(( mb * 1024 * 1024 ))
  else
    die "MEMORY_MB=$MEMORY_MB is out of range: from 6 to $total_mb (the memory here), or 0 for no limit"
  fi
}

# report_signal RC: one line for a command that a signal ended, in place of bash's report (`Killed`
# and the whole subshell's source); Ctrl-C, kill, a hang-up or a closed reader go unremarked, as in
# a shell. The exit code stays RC. (As in a shell, a command that exits 129-159 itself reads as one
# that a signal ended.)
report_signal() {
  [ "$1" -gt 128 ] || return 0
  local sig
  sig=$(kill -l $(($1 - 128)) 2>/dev/null) || return 0
  case $sig in
    INT|TERM|HUP|PIPE) ;;
    KILL)
      if [ "$BYTES" != 0 ]; then
        echo "error: the command was killed (SIGKILL, exit $1): the kernel kills one over" \
             "MEMORY_MB=$MEMORY_MB (or over a limit around it)" >&2
      else
        echo "error: the command was killed (SIGKILL, exit $1)" >&2
      fi ;;
    *) echo "error: the command died of SIG$sig (exit $1)" >&2 ;;
  esac
}

check_cpus
check_memory

ROOT=/sys/fs/cgroup
NAME=tinygpt-limits-$$
made=()
trap 'for d in "${made[@]}"; do rmdir "$d" 2>/dev/null; done' EXIT

# own CONTROLLER: the folder of this process's cgroup in CONTROLLER's v1 hierarchy (/proc/self/cgroup
# names it; a made group nested there keeps the caller's own limits above it). Not found: exit 77.
own() {
  local path
  path=$(awk -F: -v c="$1" '{ n = split($2, cs, ",")
                              for (i = 1; i <= n; i++) if (cs[i] == c) { sub(/^[^:]*:[^:]*:/, ""); print; exit } }' \
         /proc/self/cgroup)
  path=$ROOT/$1${path%/}
  [ -d "$path" ] || { echo "cannot find this process's $1 cgroup under $ROOT/$1" >&2; exit 77; }
  echo "$path"
}

group() {  # group FOLDER FILE VALUE: make FOLDER/$NAME (once) and write VALUE to its FILE
  if [ ! -d "$1/$NAME" ]; then
    mkdir "$1/$NAME" 2>/dev/null || { echo "cannot make a cgroup under $1 (root needed)" >&2; exit 77; }
    made+=("$1/$NAME")
  fi
  echo "$3" > "$1/$NAME/$2" 2>/dev/null || { echo "cannot set $1/$NAME/$2" >&2; exit 77; }
}

if [ -f $ROOT/cgroup.controllers ]; then  # cgroup v2: one group holds both limits
  for c in cpu memory; do echo "+$c" > $ROOT/cgroup.subtree_control 2>/dev/null; done
  [ "$QUOTA" != 0 ] && group $ROOT cpu.max "$QUOTA 100000"
  [ "$BYTES" != 0 ] && group $ROOT memory.max "$BYTES"
  dirs=($ROOT)
else  # cgroup v1: a group in each controller's hierarchy, inside this process's own cgroup there
  dirs=()  # (a controller not asked for is not looked up: a machine may have it off)
  if [ "$QUOTA" != 0 ]; then
    CPU=$(own cpu) || exit 77
    group "$CPU" cpu.cfs_quota_us "$QUOTA"
    dirs+=("$CPU")
  fi
  if [ "$BYTES" != 0 ]; then
    MEM=$(own memory) || exit 77
    group "$MEM" memory.limit_in_bytes "$BYTES"
    dirs+=("$MEM")
  fi
fi
# on_signal NUMBER: a signal to this shell. Before the command has started ($! is its pid once it
# has; nothing else runs in the background here), the script ends: `interrupted`, 128 + NUMBER.
# After, a SIGTERM is passed on (a `kill` of this script's pid reaches nothing else); Ctrl-C and a
# hang-up are not, as the terminal sends those to its whole foreground process group, the command
# included: one more would be a second Ctrl-C (train.py's first saves a checkpoint). The wait below
# goes on until the command ends.
on_signal() {
  signalled=1
  [ -n "${!:-}" ] || { echo interrupted >&2; exit $((128 + $1)); }
  [ "$1" = 15 ] && kill -TERM "$!"
}
trap 'on_signal 2' INT
trap 'on_signal 15' TERM
trap 'on_signal 1' HUP

# the command runs in a subshell that joins the groups first; this shell stays outside to remove them.
# It runs in the background so that this shell can act on a SIGTERM meanwhile (bash runs no trap until
# a foreground command ends), with this shell's stdin (bash gives a background job /dev/null), in this
# shell's process group (the terminal's Ctrl-C reaches it), with the signals as this script found them
# (the subshell's exec puts back the SIGINT that bash ignores in a background job).
# Its stderr goes to the command (fd 3); this shell's own, where bash reports a killed job, to /dev/null.
{
  (for d in "${dirs[@]}"; do [ -d "$d/$NAME" ] && { echo $BASHPID > "$d/$NAME/cgroup.procs" || exit 77; }; done
   exec "$@") <&0 2>&3 3>&- &
  # wait for the command to end: a signal cuts a wait short (128 + its number), so wait again
  signalled=1
  while [ -n "$signalled" ]; do
    signalled=''
    wait "$!"
    rc=$?
  done
} 3>&2 2>/dev/null
report_signal "$rc"
exit "$rc"
