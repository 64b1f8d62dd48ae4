# proctor shell controller. Runs inside the sandbox with its state folder as
# $1, in the sandbox's working directory and environment. Reads requests on
# stdin and answers frames on stdout.
#
# Each command runs in a forked subshell that job control (set -m) puts in
# its own process group, with stdout and stderr going to files, never to this
# stdout, so a background child that keeps running cannot hold a call open.
# The subshell first restores the saved working directory and exported
# variables and saves them again when it exits, so `cd`, `export` and
# `unset` persist. The controller itself never takes the command's state: a
# command that breaks PATH cannot break the controller. A fresh command
# (flag F) skips both steps: it starts from the controller's own directory
# and environment, the sandbox's starting state, and leaves nothing behind.
#
# Request:  "CAP <bytes>" sets the per-stream cap (head and tail halves).
# Request:  "STAT" answers "@@PROCTOR STAT <pids> <pids_max>" from the
#           sandbox's cgroup (0 and max when unknown), without a fork.
# Request:  "SIG <signal> <pid>" signals pid with the builtin kill, without
#           a fork, and answers "@@PROCTOR SIG <status>".
# Request:  "RUN <id> <timeout_ms> <nscript> <nstdin> [F]" then <nscript> bytes
#           of bash script, then <nstdin> bytes of standard input; F: fresh.
# Replies:  "@@PROCTOR START <id> <pgid>" once the command runs, then
#           "@@PROCTOR DONE <id> <exit> <timedout> <oom> <outsize> <errsize> <outsent> <errsent>"
#           followed by the kept bytes of stdout, then of stderr.
__S=$1
LC_ALL=C
exec 2>>"$__S/controller.err"
set -m
__cap=1048576
__oomfile=
for __f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
  [ -r "$__f" ] && { __oomfile=$__f; break; }
done
__pidsdir=
for __f in /sys/fs/cgroup /sys/fs/cgroup/pids; do
  [ -r "$__f/pids.current" ] && { __pidsdir=$__f; break; }
done
__oomcount() {
  local k v
  __oom=0
  if [ -n "$__oomfile" ]; then
    while read -r k v; do [ "$k" = oom_kill ] && __oom=$v; done < "$__oomfile"
  fi
}
# The timer kills a command's group when its time is up. It marks the
# command as timed out before it kills, so the controller, woken by the
# kill, always sees the mark.
coproc __TIMER {
  armed=
  while :; do
    if [ -n "$armed" ]; then
      read -r -t "$secs" cmd a b c; rc=$?
    else
      read -r cmd a b c; rc=$?
    fi
    if [ $rc -gt 128 ]; then
      : > "$__S/fired.$armed"
      kill -KILL -- "-$pgid" 2>/dev/null
      armed=
      continue
    fi
    [ $rc -ne 0 ] && exit 0
    case $cmd in
      ARM) armed=$a; pgid=$b; secs=$c ;;
      DISARM) armed= ;;
    esac
  done
}
# __pos FD sets __sz to the offset of this shell's fd FD, which shares its
# open file with the command's stdout or stderr: the bytes written there,
# read without a process. Empty when /proc cannot tell.
__pos() {
  local k v
  __sz=
  while read -r k v; do
    [ "$k" = pos: ] && { __sz=$v; return; }
  done < "/proc/$$/fdinfo/$1"
} 2>/dev/null
# __slurp FILE SIZE reads a small output into __sv with builtins: only
# when the file holds exactly SIZE bytes, none of them NUL (which bash
# drops), and SIZE is within the cap (a longer output is sent as its head
# and tail); otherwise it fails and the caller falls back to stat and cat.
__slurp() {
  __sv=
  [ "$2" -le 65536 ] && [ "$2" -le "$__cap" ] || return 1
  [ "$2" -eq 0 ] && ! [ -s "$1" ] && return 0
  IFS= read -r -N $(($2 + 1)) __sv < "$1"
  [ "${#__sv}" -eq "$2" ]
}
__send() {
  if [ "$2" -le "$__cap" ]; then
    cat -- "$1"
  else
    head -c $((__cap / 2)) -- "$1"
    tail -c $((__cap - __cap / 2)) -- "$1"
  fi
}
# The names exported when the controller started: a command unsets them
# all before it restores the saved state, so an `unset` persists too.
mapfile -t __base < <(compgen -e)
{ export -p; printf 'cd -- %q 2>/dev/null\n' "$PWD"; } > "$__S/state"
__oomcount; __oomlast=$__oom

# Files of finished commands, removed in batches to save a process per call.
# Every command gets fresh files: a background child of an earlier command
# may still write to its own.
__junk=()

while IFS=' ' read -r __op __id __tmo __n __ni __fresh; do
  case "$__op" in
    CAP) __cap=$__id; continue ;;
    STAT)
      __pc=0 __pm=max
      if [ -n "$__pidsdir" ]; then
        read -r __pc < "$__pidsdir/pids.current"
        read -r __pm < "$__pidsdir/pids.max"
      fi
      echo "@@PROCTOR STAT $__pc $__pm"
      continue ;;
    SIG)
      kill -s "$__id" -- "$__tmo" 2>/dev/null
      echo "@@PROCTOR SIG $?"
      continue ;;
    RUN) ;;
    *) echo "@@PROCTOR BAD $__op"; continue ;;
  esac
  # bash reads a pipe one byte per call: long bodies go through head.
  # Short bodies stay in a variable the command evals; long ones go
  # through a file it sources.
  if [ "$__n" -le 4096 ]; then
    IFS= read -r -N "$__n" __body
  else
    head -c "$__n" > "$__S/cmd"
    __body='. "$__S/cmd"'
  fi
  __in=/dev/null
  if [ "${__ni:-0}" -gt 0 ]; then
    __in=$__S/in.$__id
    head -c "$__ni" > "$__in"
    __junk+=("$__in")
  fi
  __out=$__S/out.$__id __err=$__S/err.$__id
  __junk+=("$__out" "$__err")
  # The controller holds the output files open too, to learn how much the
  # command wrote from the shared offsets (__pos).
  # If either cannot be opened, the command's redirection fails, and the
  # command with it, as when it opened them itself.
  __ofd= __efd=
  exec {__ofd}>"$__out" || __ofd=
  exec {__efd}>"$__err" || __efd=
  (
    exec {__ofd}>&- {__efd}>&-
    if [ "$__fresh" != F ]; then
      unset -v "${__base[@]}" 2>/dev/null
      . "$__S/state"
      trap '__rc=$?; [ -z "$__proctor_keep" ] && { export -p; printf "cd -- %q 2>/dev/null\n" "$PWD"; } > "$__S/state"; exit $__rc' EXIT
    fi
    echo 500 > /proc/self/oom_score_adj 2>/dev/null
    eval "unset -v __body __op __id __tmo __n __ni __fresh __f __oom __oomlast __base __junk __in __out __err __code __pid __timedout __pc __pm __pidsdir __ofd __efd __sz __sv __ov __ev __fast; $__body"
  ) < "$__in" >&"$__ofd" 2>&"$__efd" &
  __pid=$!
  echo "@@PROCTOR START $__id $__pid"
  __timedout=0
  if [ "$__tmo" -gt 0 ]; then
    printf 'ARM %s %s %d.%03d\n' "$__id" "$__pid" $((__tmo / 1000)) $((__tmo % 1000)) >&"${__TIMER[1]}"
  fi
  # wait's own stderr takes the job's "Done" notice, which would otherwise
  # grow controller.err by the subshell's text on every call.
  wait "$__pid" 2>/dev/null; __code=$?
  if [ "$__tmo" -gt 0 ]; then
    echo DISARM >&"${__TIMER[1]}"
    if [ -e "$__S/fired.$__id" ]; then
      __timedout=1
      rm -f -- "$__S/fired.$__id"
      # Background children of a timed-out command go too.
      kill -KILL -- "-$__pid" 2>/dev/null
    fi
  fi
  # A command killed by a signal while the cgroup's OOM-kill count grew
  # was killed for memory.
  __oomk=0
  if [ "$__code" -ge 128 ]; then
    __oomcount
    [ "$__oom" != "$__oomlast" ] && __oomk=1
    __oomlast=$__oom
  fi
  # Small outputs go out through builtins (no stat, cat or rm: three
  # processes a call, most of a short command's cost); anything else,
  # through stat and cat.
  __fast= __os= __es=
  if [ -n "$__ofd" ] && [ -n "$__efd" ]; then
    __pos "$__ofd"; __os=$__sz
    __pos "$__efd"; __es=$__sz
  fi
  [ -n "$__ofd" ] && exec {__ofd}>&-
  [ -n "$__efd" ] && exec {__efd}>&-
  if [ -n "$__os" ] && [ -n "$__es" ] && __slurp "$__out" "$__os"; then
    __ov=$__sv
    __slurp "$__err" "$__es" && __ev=$__sv && __fast=1
  fi
  __sv=
  if [ -z "$__fast" ]; then
    __os=0; __es=0
    if [ -s "$__out" ] || [ -s "$__err" ]; then
      stat -c %s -- "$__out" "$__err" > "$__S/sizes"
      { read -r __os; read -r __es; } < "$__S/sizes"
    fi
  fi
  __ok=$__os; [ "$__os" -gt "$__cap" ] && __ok=$__cap
  __ek=$__es; [ "$__es" -gt "$__cap" ] && __ek=$__cap
  echo "@@PROCTOR DONE $__id $__code $__timedout $__oomk $__os $__es $__ok $__ek"
  if [ -n "$__fast" ]; then
    printf '%s' "$__ov" "$__ev"
    __ov= __ev=
  else
    [ "$__os" -gt 0 ] && __send "$__out" "$__os"
    [ "$__es" -gt 0 ] && __send "$__err" "$__es"
  fi
  # What a command wrote, and the input it was given, are freed at once
  # (a builtin truncation); the files themselves go in batches.
  [ "$__os" -gt 0 ] && : > "$__out"
  [ "$__es" -gt 0 ] && : > "$__err"
  [ "$__in" != /dev/null ] && : > "$__in"
  if [ "${#__junk[@]}" -ge 96 ]; then
    rm -f -- "${__junk[@]}"
    __junk=()
  fi
done
