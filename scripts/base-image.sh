#!/usr/bin/env bash
# Build the local test base image from Debian packages (no registry needed):
# debootstrap a minimal bookworm into a folder and `docker import` it.
# Skips the work when the image already exists.
set -euo pipefail

image=${PROCTOR_BASE_IMAGE:-proctor-base:bookworm}
log() { echo "base-image: $*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
  log "$image present"
  exit 0
fi

# The mirror this machine is configured with, never a hard-coded host.
mirror=${PROCTOR_DEBIAN_MIRROR:-}
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
  log "no Debian mirror found; set PROCTOR_DEBIAN_MIRROR"
  exit 1
fi

dir=$(mktemp -d /tmp/proctor-rootfs.XXXXXX)
trap 'rm -rf "$dir"' EXIT
log "debootstrap bookworm from $mirror (a few minutes)"
debootstrap --variant=minbase \
  --include=python3,python3-pytest,git,patch,procps,ca-certificates \
  bookworm "$dir" "$mirror" >"$dir.log" 2>&1 || { tail -n 30 "$dir.log" >&2; exit 1; }
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
tar -C "$dir" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' - "$image" >/dev/null
rm -f "$dir.log"
log "built $image"
