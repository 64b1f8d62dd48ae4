"""Write the Python runtime's standard library: CPython's Lib/ compiled to
bytecode in one zip, less what cannot work on WASI or has no use in a
plugin. Run by build.sh with the native build Python of the same version,
so the bytecode matches the runtime:

    python3.13 stdlib.py SRC/Lib BUILD/build/lib.wasi-wasm32-3.13 OUT.zip

The zip is reproducible: sorted entries, a fixed date, bytecode validated
by hash (never by a file's time), file names as the runtime sees them.
"""

import importlib.util
import os
import sys
import zipfile

# Top-level modules and packages left out: tests, GUIs and REPLs, installers,
# and modules whose C part the WASI build lacks (threads, subprocess, ssl,
# ctypes, sqlite3, bz2, lzma, curses, dbm).
EXCLUDE = {
    "__hello__", "__phello__", "_pyrepl", "_android_support", "_apple_support", "_aix_support",
    "_osx_support", "_ios_support", "_bootsubprocess", "bz2", "ctypes", "curses", "dbm", "ensurepip", "idlelib",
    "lzma", "msilib", "multiprocessing", "pydoc", "pydoc_data", "site-packages", "sqlite3", "ssl",
    "test", "tkinter", "turtle", "turtledemo", "venv",
}  # fmt: skip

# Where the zip lies in the runtime: code objects carry this path, so a
# traceback through the standard library names it.
GUEST = "/lib/python313.zip"


def modules(lib):
    """(path in the zip, source file) of each module to compile, sorted."""
    out = []
    for root, dirs, files in os.walk(lib):
        rel_root = os.path.relpath(root, lib)
        top = rel_root.split(os.sep)[0]
        if rel_root == ".":
            dirs[:] = [d for d in dirs if d not in EXCLUDE and d != "__pycache__"]
        else:
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "tests", "test", "idle_test")]
        if top in EXCLUDE:
            continue
        for f in files:
            if not f.endswith(".py"):
                continue
            if rel_root == "." and f[:-3] in EXCLUDE:
                continue
            rel = f if rel_root == "." else os.path.join(rel_root, f)
            out.append((rel.replace(os.sep, "/"), os.path.join(root, f)))
    return sorted(out)


def pyc(source_path, guest_name):
    with open(source_path, "rb") as f:
        source = f.read()
    code = compile(source, guest_name, "exec", dont_inherit=True, optimize=0)
    return importlib._bootstrap_external._code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False)


def main():
    lib, sysconfigdata, out = sys.argv[1:4]
    entries = modules(lib)
    for f in sorted(os.listdir(sysconfigdata)):
        if f.startswith("_sysconfigdata_") and f.endswith(".py"):
            entries.append((f, os.path.join(sysconfigdata, f)))
    entries.sort()
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w") as z:
        for rel, src in entries:
            info = zipfile.ZipInfo(rel[:-3] + ".pyc", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, pyc(src, f"{GUEST}/{rel}"), compresslevel=9)
    os.replace(tmp, out)
    print(f"stdlib: {len(entries)} modules, {os.path.getsize(out)} bytes in {out}")


if __name__ == "__main__":
    main()
