#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io when missing and
# start dockerd without a bridge network (sandboxes use network "none").
# Safe to run again: it does nothing when an engine already answers.
set -euo pipefail

log() { echo "engine: $*" >&2; }

if docker info >/dev/null 2>&1; then
  exit 0
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root"
    exit 1
  fi
  source "$(dirname "${BASH_SOURCE[0]}")/apt-lock.sh"
  apt_lock
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  apt_unlock
fi

if ! docker info >/dev/null 2>&1; then
  logfile=${PROCTOR_DOCKERD_LOG:-/var/log/proctor-dockerd.log}
  log "starting dockerd (log: $logfile)"
  # setsid: the engine outlives this script and the make that called it.
  setsid dockerd --bridge=none --iptables=false >"$logfile" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
fi
if ! docker info >/dev/null 2>&1; then
  log "dockerd did not answer within 30s; see ${PROCTOR_DOCKERD_LOG:-/var/log/proctor-dockerd.log}"
  exit 1
fi
log "engine ready ($(docker version --format '{{.Server.Version}} API {{.Server.APIVersion}}'))"
