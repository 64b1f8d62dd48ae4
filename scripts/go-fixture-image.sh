#!/usr/bin/env bash
# Build proctor-swesmith-go:1, the SWE-smith Go fixture image, offline: the
# local base image plus this machine's Go toolchain (the one building
# proctor) and the fixture module in testdata/swesmith/goimage.
set -euo pipefail
cd "$(dirname "$0")/.."
image=proctor-swesmith-go:1
docker image inspect "$image" >/dev/null 2>&1 && exit 0
goroot=$(go env GOROOT)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp -r testdata/swesmith/goimage/. "$ctx/"
mkdir -p "$ctx/go"
for d in bin pkg src lib go.env VERSION; do
  [ -e "$goroot/$d" ] && cp -a "$goroot/$d" "$ctx/go/"
done
rm -rf "$ctx/go/pkg/obj" "$ctx/go/src/cmd/vendor/golang.org/x/tools/internal/testenv" 2>/dev/null || true
echo "fixture: building $image (Go $(go env GOVERSION))" >&2
docker build -q -t "$image" "$ctx" >/dev/null
