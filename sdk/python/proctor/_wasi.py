"""What the WASI runtime refuses a plugin, refused natively: proctor.testing
runs hooks (and a plugin's import) under confined(), so that a plugin whose
native tests pass does not fail in the .wasm on something the runtime
lacks. In the runtime a plugin has no processes, threads, network or
writable files, and it sees no files but its own (under /app), the SDK and
the standard library; here, while plugin code runs:

- sockets, subprocesses (subprocess, os.system, os.exec*, os.spawn*,
  os.fork, os.posix_spawn) and threads fail as they fail in the runtime;
- opening a file to write, and making, removing, renaming or changing a
  file or folder fail as on the runtime's read-only files, and there is
  no /tmp (tempfile finds no folder);
- reading or listing a path outside the plugin's folder, the SDK and the
  standard library fails as a missing file does in the runtime (the
  machine's /etc/passwd, /tmp, a package installed in site-packages).

The emulator's own operations (sandbox.exec runs bash, files act on a
temporary folder) run unconfined. Python's audit hooks (PEP 578) see the
operations; an audit hook cannot be removed, so the one this module adds
checks a flag and does nothing outside confined().
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import sysconfig
import threading

import _thread

# Why a refusal happens, after the runtime's own message.
_WHY = "(proctor.testing refuses it as the WASI runtime does: {})"

_state = threading.local()
_installed = False


def _roots(plugin_dirs) -> tuple:
    """The folders a confined plugin may read: the standard library (less
    its site-packages), the SDK and the plugin's folders."""
    paths = sysconfig.get_paths()
    allowed = {paths["stdlib"], paths["platstdlib"], os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    allowed.update(plugin_dirs)
    denied = {paths["purelib"], paths["platlib"]}
    real = lambda ps: tuple(sorted({os.path.realpath(p) for p in ps if p}))  # noqa: E731
    return real(allowed), real(denied)


def _under(path: str, dirs) -> bool:
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


class _Confinement:
    def __init__(self, plugin_dirs):
        self.allowed, self.denied = _roots(plugin_dirs)

    def readable(self, path) -> bool:
        p = os.path.realpath(os.fsdecode(path))
        return _under(p, self.allowed) and not _under(p, self.denied)


def _path(arg):
    if isinstance(arg, int):
        return None
    try:
        return os.fspath(arg)
    except TypeError:
        return None


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _writes(mode, flags) -> bool:
    if isinstance(mode, str) and mode and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and flags != -1 and bool(flags & _WRITE_FLAGS)


# Audit events of operations the runtime does not have at all.
_NO_PROCESS = {"subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "pty.spawn"}
_CHANGES = {
    "os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.chmod", "os.chown", "os.link", "os.symlink",
    "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod", "shutil.rmtree",
    "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move", "shutil.chown",
}  # fmt: skip
_LISTS = {"os.listdir", "os.scandir", "glob.glob", "os.walk"}


def _audit(event: str, args: tuple) -> None:
    c = getattr(_state, "active", None)
    if c is None:
        return
    if event == "socket.__new__":
        raise OSError(errno.ENOTSUP, "Not supported", _WHY.format("a plugin has no network"))
    if event == "os.system":
        # WASI's os module has no system at all.
        raise AttributeError("module 'os' has no attribute 'system' " + _WHY.format("a plugin has no processes: run commands in the sandbox with proctor.exec"))
    if event in _NO_PROCESS:
        raise OSError(errno.ENOTSUP, "Not supported", _WHY.format("a plugin has no processes: run commands in the sandbox with proctor.exec"))
    if event in _CHANGES:
        raise OSError(errno.ENOSYS, "Function not implemented", _WHY.format(f"{event}: a plugin's files are read-only"))
    if event == "open":
        path = _path(args[0])
        if path is None:
            return
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else None
        if _writes(mode, flags) and c.readable(path):
            raise OSError(errno.ENOSYS, "Function not implemented", os.fsdecode(path) + " " + _WHY.format("a plugin's files are read-only"))
        if not c.readable(path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fsdecode(path) + " " + _WHY.format("a plugin sees only its own files, the SDK and the standard library"))
    elif event in _LISTS:
        path = _path(args[0]) if args else None
        if path is not None and not c.readable(path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fsdecode(path) + " " + _WHY.format("a plugin sees only its own files, the SDK and the standard library"))


def _no_thread(*args, **kw):
    raise RuntimeError("can't start new thread " + _WHY.format("a plugin has no threads"))


# The thread starters, as _thread and threading name them (3.10 to 3.13).
_ORIGINAL = [
    (m, n, getattr(m, n))
    for m in (_thread, threading)
    for n in ("start_new_thread", "start_joinable_thread", "_start_new_thread", "_start_joinable_thread")
    if hasattr(m, n)
]


def _enter(c):
    """Make c (None: nothing) the confinement; returns the previous one."""
    global _installed
    if c is not None and not _installed:
        sys.addaudithook(_audit)
        _installed = True
    prev = getattr(_state, "active", None)
    _state.active = c
    for m, n, f in _ORIGINAL:
        setattr(m, n, f if c is None else _no_thread)
    return prev


@contextlib.contextmanager
def confined(plugin_dirs=()):
    """Run the block as the runtime runs plugin code (see the module's doc)."""
    # tempfile looks for its folder once and keeps it: have it look again,
    # confined, and find none, as in the runtime.
    tf = sys.modules.get("tempfile")
    tempdir = tf.tempdir if tf is not None else None
    if tf is not None:
        tf.tempdir = None
    prev = _enter(_Confinement(plugin_dirs))
    try:
        yield
    finally:
        _enter(prev)
        if tf is not None:
            tf.tempdir = tempdir


@contextlib.contextmanager
def unconfined():
    """Run the block as the host: the emulator's own operations."""
    prev = _enter(None)
    try:
        yield
    finally:
        _enter(prev)
