#!/usr/bin/env bash
# Build the static tmux that proctor's Terminus-2 brings into sandboxes
# whose image has no tmux: Debian bookworm's tmux (the source package, with
# Debian's patches) linked statically against Debian's own static libevent
# and ncurses, and glibc's.
#
#   bash agent/terminus/tmuxbin/build.sh              build unless already built
#   bash agent/terminus/tmuxbin/build.sh --background start that build and return
#   bash agent/terminus/tmuxbin/build.sh --print-dir  print the folder
#
# A build holds <cache>/tmux/.lock: a second build waits for it, and
# tmuxbin.Find waits for a build under way, so a background build (its log:
# <cache>/tmux/build.log) can run while the rest of a test suite does.
#
# The result goes to <cache>/tmux/<version>-<digest of this folder>/tmux,
# where <cache> is $PROCTOR_CACHE_DIR or ${XDG_CACHE_HOME:-~/.cache}/proctor,
# so a machine builds each recipe once; proctor finds it there
# (tmuxbin.go computes the same name). Nothing is installed on the machine:
# Debian's packages are downloaded with a private apt state under
# <cache>/tmux and unpacked there; the compiler is the machine's gcc. The
# mirror is the one this machine's apt sources name (or
# $PROCTOR_DEBIAN_MIRROR).
#
# Why Debian bookworm's tmux: Harbor installs tmux with the image's package
# manager when the image lacks it, and bookworm's is what it gets on the
# Debian images Terminal-Bench tasks mostly use. glibc rather than musl:
# character widths (wcwidth) and locales then behave as in the images'
# own glibc programs.
set -euo pipefail

TMUX_VERSION=3.3a-3
TMUX_ORIG_SHA256=e4fd347843bd0772c4f48d6dde625b0b109b7a380ff15db21e97c11a4dcdf93f
LIBS=(libevent-dev libevent-2.1-7 libevent-core-2.1-7 libevent-extra-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7 libncurses-dev libtinfo6)
JOBS=${JOBS:-2}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The recipe's digest: each file of this folder but Go's, by name, as
# tmuxbin.go's Key.
key() {
  local f
  (cd "$here" && for f in $(LC_ALL=C ls | grep -v '\.go$'); do printf '%s\0' "$f"; cat "$f"; printf '\0'; done) | sha256sum | cut -c1-12
}

if [ -n "${PROCTOR_CACHE_DIR:-}" ]; then
  cache=$PROCTOR_CACHE_DIR/tmux
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/proctor/tmux
fi
out=$cache/${TMUX_VERSION%-*}-$(key)
if [ "${1:-}" = --print-dir ]; then
  echo "$out"
  exit 0
fi
if [ -x "$out/tmux" ]; then
  echo "tmux: $out/tmux (built before)"
  exit 0
fi
mkdir -p "$cache"
case "${1:-}" in
--background)
  exec 9>"$cache/.lock"
  if ! flock -n 9; then
    echo "tmux: a build is under way on this machine (log: $cache/build.log)"
    exit 0
  fi
  # The build inherits the lock (fd 9) and holds it until it ends.
  setsid bash "${BASH_SOURCE[0]}" --locked </dev/null >"$cache/build.log" 2>&1 &
  echo "tmux: building in the background (log: $cache/build.log)"
  exit 0
  ;;
--locked) ;; # started by --background, which took the lock
*)
  exec 9>"$cache/.lock"
  flock 9
  ;;
esac
if [ -x "$out/tmux" ]; then
  echo "tmux: $out/tmux (built meanwhile)"
  exit 0
fi
# Each tool, with the Debian package that brings it.
for tool in apt-get:apt dpkg-deb:dpkg dpkg-source:dpkg-dev flock:util-linux make:make gcc:gcc sha256sum:coreutils tar:tar; do
  command -v "${tool%%:*}" >/dev/null ||
    { echo "tmux: ${tool%%:*} is missing: install it (apt-get install ${tool#*:})" >&2; exit 1; }
done
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] ||
  { echo "tmux: glibc's static library is missing: apt-get install libc6-dev" >&2; exit 1; }

# --- Debian's packages, through a private apt state -------------------------
mirror=${PROCTOR_DEBIAN_MIRROR:-}
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 ~ /^https?:/ { print $2; exit }' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "tmux: no Debian mirror in the apt sources: set PROCTOR_DEBIAN_MIRROR" >&2; exit 1; }
apt=$cache/apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/parts"
cat >"$apt/sources.list" <<SRC
deb $mirror bookworm main
deb-src $mirror bookworm main
SRC
cat >"$apt/apt.conf" <<CONF
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "$apt/parts";
Dir::Etc::Preferences "$apt/parts/none";
Dir::Etc::PreferencesParts "$apt/parts";
Dir::State::Lists "$apt/lists";
Dir::Cache "$apt";
Dir::Cache::archives "$apt/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CONF
[ "$(id -u)" = 0 ] && echo 'APT::Sandbox::User "root";' >>"$apt/apt.conf"
export APT_CONFIG=$apt/apt.conf
echo "tmux: apt lists from the machine's mirror" >&2
apt-get update -qq

rm -rf "$cache"/work-*
work=$cache/work-$(basename "$out")
mkdir -p "$work/src" "$work/debs" "$work/sysroot"
(cd "$work/src" && apt-get source -qq --download-only "tmux=$TMUX_VERSION" >/dev/null)
orig=$(ls "$work"/src/tmux_*.orig.tar.gz)
echo "$TMUX_ORIG_SHA256  $orig" | sha256sum -c --status ||
  { echo "tmux: $orig is not the tarball the recipe pins (sha256 $TMUX_ORIG_SHA256)" >&2; exit 1; }
(cd "$work/src" && dpkg-source -q -x tmux_"$TMUX_VERSION".dsc tree >/dev/null)
(cd "$work/debs" && apt-get download -qq "${LIBS[@]}" >/dev/null)
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/sysroot"; done

# --- the build ----------------------------------------------------------------
sys=$work/sysroot
lib=$(ls -d "$sys"/usr/lib/*-linux-gnu | head -n1)
echo "tmux: building $TMUX_VERSION statically" >&2
(
  cd "$work/src/tree"
  export SOURCE_DATE_EPOCH=1672531200
  export CFLAGS="-O2 -I$sys/usr/include -ffile-prefix-map=$work/src/tree=/tmux"
  export LIBEVENT_CORE_CFLAGS="-I$sys/usr/include" LIBEVENT_CORE_LIBS="$lib/libevent_core.a"
  export LIBTINFO_CFLAGS="-I$sys/usr/include" LIBTINFO_LIBS="$lib/libtinfo.a"
  ./configure -q --prefix=/usr --enable-static --disable-utf8proc ac_cv_header_utempter_h=no >"$work/build.log" 2>&1 &&
    make -s -j"$JOBS" >>"$work/build.log" 2>&1
) || { tail -n 30 "$work/build.log" >&2; echo "tmux: the build failed; its log: $work/build.log" >&2; exit 1; }
strip "$work/src/tree/tmux"
mkdir -p "$out.tmp"
cp "$work/src/tree/tmux" "$out.tmp/tmux"
printf '{"tmux": "%s", "libs": "%s"}\n' "$TMUX_VERSION" "$(cd "$work/debs" && ls | tr '\n' ' ')" >"$out.tmp/build-info.json"
rm -rf "$out" && mv "$out.tmp" "$out"
rm -rf "$work"
echo "tmux: $out/tmux"
