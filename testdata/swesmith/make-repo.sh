#!/bin/bash
# make-repo.sh DIR: the SWE-smith fixture repository as a local git
# repository, for clone mode. Its first commit is the fixture image's
# /testbed commit (same files, author and dates, so the same commit id); a
# branch "bug/add_sign" adds the add_sign bug on top, as the base_commit of
# a row in the SWE-smith-oracle layout (no patch: the commit is bugged).
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dir"
mkdir -p "$dir"
cp -r "$here/image/testbed/." "$dir/"
cd "$dir"
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
g() { git -c user.email=fixture@proctor -c user.name=fixture "$@"; }
g init -q -b main
g add -A
g commit -q -m "clean state"
g checkout -q -b bug/add_sign
sed -i 's/    return a + b/    return a - b/' calc/ops.py
g commit -q -am "add_sign bug"
g checkout -q main
