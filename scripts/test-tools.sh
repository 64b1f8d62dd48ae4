#!/usr/bin/env bash
# Install the programs the tests drive besides the Docker engine, from
# Debian's packages, when they are missing: docker-registry (a real OCI
# registry on 127.0.0.1 for the plugin push/pull tests) and chromium (the
# HTML report's browser test). Safe to run again.
set -euo pipefail

need=()
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "test-tools: missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
  exit 1
fi
source "$(dirname "${BASH_SOURCE[0]}")/apt-lock.sh"
apt_lock
echo "test-tools: installing ${need[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
apt_unlock
# The package starts a registry service on :5000; the tests start their own
# on free ports. Stop only that service, through its own manager (systemd,
# or the init script's pidfile): registries other test runs started are
# theirs to stop.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now docker-registry >/dev/null 2>&1 || true
elif [ -x /etc/init.d/docker-registry ]; then
  /etc/init.d/docker-registry stop >/dev/null 2>&1 || true
fi
