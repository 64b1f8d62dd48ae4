#!/usr/bin/env bash
# Build the Python runtime for proctor plugins: CPython for WASI as a
# reactor that speaks ABI v1 itself (proctor_runtime.c), and its standard
# library as one bytecode zip (stdlib.py), from Debian's sources and
# toolchain only.
#
#   bash sdk/python/runtime/build.sh              build unless already built
#   bash sdk/python/runtime/build.sh --background start that build and return
#   bash sdk/python/runtime/build.sh --print-dir  print the runtime's folder
#
# A build holds <cache>/python/.lock: a second build waits for it, and so
# do the tests and `proctor plugin build` that need the runtime
# (sdk/python's LoadRuntime), so a background build (its log in
# <cache>/python/build.log) can run while the rest of a test suite does.
#
# The result goes to <cache>/python/<version>-<digest of this folder>/
# (python.wasm, python313.zip, build-info.json), where <cache> is
# $PROCTOR_CACHE_DIR or ${XDG_CACHE_HOME:-~/.cache}/proctor, so a machine
# builds each recipe once; `proctor plugin build` finds it there
# (sdk/python/build.go computes the same name). Nothing is installed on the
# machine: Debian's packages are downloaded with a private apt state under
# <cache>/python and unpacked there. The mirror is the one this machine's
# apt sources name (or $PROCTOR_DEBIAN_MIRROR).
#
# Inputs, pinned: CPython's upstream tarball as Debian ships it in trixie's
# python3.13 source package (Debian's patches are not applied), zlib from
# bookworm, clang/lld/llvm 19 and the wasm32 compiler-rt from bookworm,
# wasi-libc from bookworm-backports. A native CPython of the same version,
# unpacked from trixie's python3.13 packages, is the build Python.
# configure takes its known answers from wasi-config.site. JOBS (default:
# the number of cores) sets make's parallelism.
set -euo pipefail

PY_VERSION=3.13.5
PY_ORIG_SHA256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
ZLIB_SOURCE=zlib/bookworm
# The build Python: Debian's python3.13 of the same version, and the C
# library it was built for.
BUILD_PYTHON=(python3.13-minimal/trixie libpython3.13-minimal/trixie libpython3.13-stdlib/trixie libc6/trixie
  zlib1g/trixie libexpat1/trixie)
TOOLCHAIN=(clang-19 libclang-cpp19 libllvm19 libclang-common-19-dev llvm-19-linker-tools libclang1-19
  libclang-rt-19-dev-wasm32 lld-19 llvm-19 wasi-libc/bookworm-backports)
JOBS=${JOBS:-$(nproc)}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The recipe's digest: each file of this folder, by name, as build.go's Key.
key() {
  local f
  (cd "$here" && for f in $(LC_ALL=C ls); do printf '%s\0' "$f"; cat "$f"; printf '\0'; done) | sha256sum | cut -c1-12
}

if [ -n "${PROCTOR_CACHE_DIR:-}" ]; then
  cache=$PROCTOR_CACHE_DIR/python
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/proctor/python
fi
out=$cache/$PY_VERSION-$(key)
if [ "${1:-}" = --print-dir ]; then
  echo "$out"
  exit 0
fi

done_already() { [ -f "$out/python.wasm" ] && [ -f "$out/python313.zip" ] && [ -f "$out/build-info.json" ]; }
if done_already; then
  echo "python runtime: $out (built before)"
  exit 0
fi
mkdir -p "$cache"
case "${1:-}" in
--background)
  exec 9>"$cache/.lock"
  if ! flock -n 9; then
    echo "python runtime: a build is under way on this machine (log: $cache/build.log)"
    exit 0
  fi
  # The build inherits the lock (fd 9) and holds it until it ends.
  setsid bash "${BASH_SOURCE[0]}" --locked </dev/null >"$cache/build.log" 2>&1 &
  echo "python runtime: building in the background (log: $cache/build.log)"
  exit 0
  ;;
--locked) ;; # started by --background, which took the lock
*)
  exec 9>"$cache/.lock"
  if ! flock -n 9; then
    echo "python runtime: waiting for another build on this machine" >&2
    flock 9
  fi
  ;;
esac
if done_already; then
  echo "python runtime: $out (built meanwhile)"
  exit 0
fi
for tool in apt-get dpkg-deb flock make sha256sum tar xz bzip2; do
  command -v "$tool" >/dev/null || { echo "python runtime: $tool is missing: install it (apt-get install $tool)" >&2; exit 1; }
done
start=$(date +%s)
log() { echo "python runtime: $* ($(($(date +%s) - start))s)" >&2; }

# --- Debian's packages, through a private apt state -------------------------
mirror=${PROCTOR_DEBIAN_MIRROR:-}
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 ~ /^https?:/ { print $2; exit }' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
  echo "python runtime: no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list: set PROCTOR_DEBIAN_MIRROR" >&2
  exit 1
fi
apt=$cache/apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/parts" "$cache/downloads"
cat >"$apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $mirror bookworm-backports main
deb $mirror trixie main
deb-src $mirror bookworm main
deb-src $mirror trixie main
EOF
cat >"$apt/apt.conf" <<EOF
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "$apt/parts";
Dir::Etc::Preferences "$apt/preferences";
Dir::Etc::PreferencesParts "$apt/parts";
Dir::State::Lists "$apt/lists";
Dir::Cache "$apt";
Dir::Cache::archives "$apt/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
# trixie only for what names it (the build Python): the toolchain is bookworm's.
cat >"$apt/preferences" <<EOF
Package: *
Pin: release n=trixie
Pin-Priority: 100
EOF
[ "$(id -u)" = 0 ] && echo 'APT::Sandbox::User "root";' >>"$apt/apt.conf"
export APT_CONFIG=$apt/apt.conf
log "apt lists from the machine's mirror"
apt-get update -qq

dl=$cache/downloads
# The sources, the toolchain and the build Python download side by side.
log "downloading the sources, the toolchain and the build Python"
py_orig=$dl/python3.13_$PY_VERSION.orig.tar.xz
download_cpython() {
  echo "$PY_ORIG_SHA256  $py_orig" | sha256sum -c --status 2>/dev/null && return
  local version
  version=$(apt-cache showsrc python3.13 | awk -v want="$PY_VERSION" '$1 == "Version:" && index($2, want "-") == 1 { print $2; exit }')
  if [ -z "$version" ]; then
    echo "python runtime: the mirror has no python3.13 $PY_VERSION source package: change PY_VERSION and PY_ORIG_SHA256 in $here/build.sh to the version it has (apt-cache showsrc python3.13)" >&2
    return 1
  fi
  (cd "$dl" && apt-get source -qq --download-only "python3.13=$version" >/dev/null)
}
zlib_orig() { ls "$dl"/zlib_*.orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -n1 || true; }
download_zlib() {
  [ -n "$(zlib_orig)" ] || (cd "$dl" && apt-get source -qq --download-only "$ZLIB_SOURCE" >/dev/null)
}
# The candidates of today, freshly: a toolchain folder per set of versions,
# and a build Python folder per set of versions.
debs=$dl/debs
pydebs=$dl/build-python-debs
rm -rf "$debs" "$pydebs" && mkdir -p "$debs" "$pydebs"
pids=()
download_cpython & pids+=($!)
download_zlib & pids+=($!)
(cd "$debs" && apt-get download -qq "${TOOLCHAIN[@]}" >/dev/null) & pids+=($!)
(cd "$pydebs" && apt-get download -qq "${BUILD_PYTHON[@]}" >/dev/null) & pids+=($!)
for pid in "${pids[@]}"; do
  wait "$pid"
done
if ! echo "$PY_ORIG_SHA256  $py_orig" | sha256sum -c --status; then
  echo "python runtime: $py_orig is not the CPython $PY_VERSION tarball the recipe pins (sha256 $PY_ORIG_SHA256)" >&2
  exit 1
fi
zlib_orig=$(zlib_orig)

# --- the toolchain, unpacked (not installed) --------------------------------
# unpack DIR DEB...: the packages' files in DIR, afresh.
unpack() {
  local dir=$1 deb
  shift
  rm -rf "$dir" && mkdir -p "$dir"
  for deb in "$@"; do
    dpkg-deb -x "$deb" "$dir"
  done
}
tc=$cache/toolchain-$(cd "$debs" && LC_ALL=C ls | sha256sum | cut -c1-12)
if [ ! -x "$tc/usr/lib/llvm-19/bin/clang" ]; then
  log "unpacking the toolchain"
  unpack "$tc.tmp" "$debs"/*.deb
  # A sysroot of wasi-libc alone.
  mkdir -p "$tc.tmp/sysroot/include" "$tc.tmp/sysroot/lib"
  ln -s ../../usr/include/wasm32-wasi "$tc.tmp/sysroot/include/wasm32-wasi"
  ln -s ../../usr/lib/wasm32-wasi "$tc.tmp/sysroot/lib/wasm32-wasi"
  rm -rf "$tc" && mv "$tc.tmp" "$tc"
fi
llvm=$tc/usr/lib/llvm-19/bin
export LD_LIBRARY_PATH=$tc/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$tc/usr/bin:$llvm:$PATH
# Its own sysroot, so clang never reads the machine's /usr/include for wasm.
wasi_cc="$llvm/clang --target=wasm32-wasi --sysroot=$tc/sysroot"
"$llvm/clang" --version | head -n1 >&2

# Under the lock, any work folder is a build that was stopped.
rm -rf "$cache"/work-*
work=$cache/work-$(basename "$out")
mkdir -p "$work"
# Paths in the build do not reach the output: sources are mapped to
# /cpython, and the date is fixed.
export SOURCE_DATE_EPOCH=1751328000

# --- the build Python --------------------------------------------------------
# The cross build needs a CPython of its exact version to freeze modules and
# compile the standard library. Debian's own (trixie's python3.13, unpacked
# with trixie's C library, whose loader runs it) takes seconds where
# compiling one took most of this script's time. The bytecode it writes is
# the same as a CPython built from the tarball writes.
native=$cache/build-python-$(cd "$pydebs" && LC_ALL=C ls | sha256sum | cut -c1-12)
if [ ! -x "$native/bin/python3.13" ]; then
  log "unpacking Debian's python3.13 (the build Python)"
  unpack "$native.tmp" "$pydebs"/*.deb
  mkdir -p "$native.tmp/bin"
  loader=$(cd "$native.tmp" && ls usr/lib/*-linux-gnu*/ld-linux*.so.* | head -n1)
  printf '#!/bin/sh\nd=$(cd "$(dirname "$0")/.." && pwd)\nexec "$d/%s" --library-path "$d/%s" "$d/usr/bin/python3.13" "$@"\n' \
    "$loader" "$(dirname "$loader")" >"$native.tmp/bin/python3.13"
  chmod +x "$native.tmp/bin/python3.13"
  rm -rf "$native" && mv "$native.tmp" "$native"
fi
build_python=$("$native/bin/python3.13" -c 'import sys; print(sys.version.split()[0])')
if [ "$build_python" != "$PY_VERSION" ]; then
  echo "python runtime: Debian's python3.13 is $build_python, the recipe builds $PY_VERSION: set PY_VERSION and PY_ORIG_SHA256 in $here/build.sh to the version the mirror has (apt-cache showsrc python3.13)" >&2
  exit 1
fi

# --- zlib for wasm ----------------------------------------------------------
log "zlib for wasm32-wasi"
mkdir -p "$work/zlib/src" "$work/zlib/include" "$work/zlib/lib"
tar -xf "$zlib_orig" -C "$work/zlib/src" --strip-components=1
for f in adler32 crc32 deflate inffast inflate inftrees trees zutil compress uncompr; do
  $wasi_cc -O2 -w -c "$work/zlib/src/$f.c" -o "$work/zlib/$f.o"
done
"$llvm/llvm-ar" rcsD "$work/zlib/lib/libz.a" "$work"/zlib/*.o
cp "$work/zlib/src/zlib.h" "$work/zlib/src/zconf.h" "$work/zlib/include/"

# --- CPython for WASI -------------------------------------------------------
log "configuring CPython $PY_VERSION for wasm32-wasi"
src=$work/cpython
mkdir -p "$src" && tar -xJf "$py_orig" -C "$src" --strip-components=1
mkdir -p "$src/builddir/wasi" "$work/pkgconfig"
(
  cd "$src/builddir/wasi"
  # pkg-config would offer the machine's libraries (lzma, uuid, ffi,
  # readline) to the wasm build: give it none.
  export PKG_CONFIG_LIBDIR=$work/pkgconfig PKG_CONFIG_PATH=
  export CC="$wasi_cc" CPP="$wasi_cc -E" AR="$llvm/llvm-ar" RANLIB="$llvm/llvm-ranlib"
  export CFLAGS="-O2 -ffile-prefix-map=$src=/cpython"
  export ZLIB_CFLAGS="-I$work/zlib/include" ZLIB_LIBS="-L$work/zlib/lib -lz"
  # configure's known answers for this toolchain (wasi-config.site says
  # how they were made), unless told to find them all again.
  export CONFIG_SITE=../../Tools/wasm/config.site-wasm32-wasi
  if [ -z "${PROCTOR_PYTHON_FULL_CONFIGURE:-}" ] && grep -qx "# toolchain ${tc##*/toolchain-}" "$here/wasi-config.site"; then
    CONFIG_SITE="$CONFIG_SITE $here/wasi-config.site"
  else
    log "configure checks everything: the toolchain is not the one of wasi-config.site"
  fi
  # wazero refuses absolute-time waits: time.sleep must use nanosleep.
  export ac_cv_func_clock_nanosleep=no ac_cv_lib_rt_clock_nanosleep=no
  # mimalloc, unused by this build (it allocates with libc's malloc), would
  # still seed its heap from the clock at start: leave it out.
  ../../configure --host=wasm32-wasi --build=x86_64-pc-linux-gnu --with-build-python="$native/bin/python3.13" \
    --disable-test-modules --without-mimalloc >"$work/wasi-configure.log" 2>&1 ||
    { tail -n 30 "$work/wasi-configure.log" >&2; exit 1; }
  log "building CPython $PY_VERSION for wasm32-wasi"
  make -j"$JOBS" >"$work/wasi-make.log" 2>&1 || { tail -n 30 "$work/wasi-make.log" >&2; exit 1; }

  # The reactor: libpython's objects with proctor_runtime.c in place of
  # Programs/python.o, linked with the build's own flags and libraries.
  log "linking the runtime"
  cp "$here/proctor_runtime.c" "$work/proctor_runtime.c"
  cat >"$work/reactor.mk" <<'EOF'
proctor-runtime.o: $(PROCTOR_SRC)
	$(CC) -c $(PY_CFLAGS) $(PY_CPPFLAGS) -o $@ $<
python-reactor.wasm: proctor-runtime.o $(LINK_PYTHON_DEPS)
	$(LINKCC) $(PY_CORE_LDFLAGS) -mexec-model=reactor -o $@ proctor-runtime.o $(LINK_PYTHON_OBJS) $(LIBS) $(MODLIBS) $(SYSLIBS)
EOF
  make -f Makefile -f "$work/reactor.mk" PROCTOR_SRC="$work/proctor_runtime.c" python-reactor.wasm >>"$work/wasi-make.log" 2>&1 ||
    { tail -n 30 "$work/wasi-make.log" >&2; exit 1; }
)
stage=$out.tmp
rm -rf "$stage" && mkdir -p "$stage"
# Debug information out, function names kept (they name a trap's frames).
"$llvm/llvm-objcopy" --strip-debug "$src/builddir/wasi/python-reactor.wasm" "$stage/python.wasm"

log "compiling the standard library"
"$native/bin/python3.13" "$here/stdlib.py" "$src/Lib" "$src/builddir/wasi/$(cat "$src/builddir/wasi/pybuilddir.txt")" "$stage/python313.zip" >&2

# The .deb files of the packages named, as a JSON list's items.
debs_of() {
  local dir=$1 p
  shift
  (cd "$dir" && for p in "$@"; do ls "${p}"_*.deb | LC_ALL=C sort | tail -n1; done | sed 's/.*/"&"/' | paste -sd, -)
}
{
  echo "{"
  echo "  \"cpython\": \"$PY_VERSION\","
  echo "  \"cpython_orig_sha256\": \"$PY_ORIG_SHA256\","
  echo "  \"zlib\": \"$(basename "$zlib_orig")\","
  echo "  \"toolchain\": [$(debs_of "$debs" "${TOOLCHAIN[@]%%/*}")],"
  echo "  \"build_python\": [$(debs_of "$pydebs" "${BUILD_PYTHON[@]%%/*}")],"
  echo "  \"recipe\": \"$(basename "$out")\","
  echo "  \"python.wasm_sha256\": \"$(sha256sum "$stage/python.wasm" | cut -d' ' -f1)\","
  echo "  \"python313.zip_sha256\": \"$(sha256sum "$stage/python313.zip" | cut -d' ' -f1)\""
  echo "}"
} >"$stage/build-info.json"
rm -rf "$out" && mv "$stage" "$out"
[ -n "${PROCTOR_PYTHON_KEEP_WORK:-}" ] || rm -rf "$work"
log "built $out: python.wasm $(stat -c %s "$out/python.wasm") bytes, python313.zip $(stat -c %s "$out/python313.zip") bytes"
