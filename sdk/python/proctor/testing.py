"""Run a plugin's hooks natively, under the CPython on your machine, against
an emulated proctor host, as the Go SDK's sdktest does. Sandbox operations
act on a temporary folder through bash on this machine, datasets are rows
you give, model answers come from a function you give. Every hook still
goes through the same JSON encoding and dispatch as in the wasm runtime::

    import unittest
    from proctor import testing

    class TestJudge(unittest.TestCase):
        def test_score(self):
            testing.load("judge.py")
            with testing.Host() as host:
                host.model = lambda messages: "SCORE: 7"
                resp = host.call("reward.score", {"task": {"id": "t1"}, "trajectory": {}})
                self.assertEqual(resp.reward, 0.7)

Like the real host, the emulator refuses operations the plugin's manifest
does not declare (status 3, proctor.DeniedError), so a missing capability
shows up in the plugin's own tests. And as the WASI runtime does, it
refuses the plugin's code (its hooks, and its import by load) sockets,
subprocesses, threads, writing files and reading files other than its own,
the SDK and the standard library (see proctor._wasi), so a plugin whose
native tests pass works in the .wasm.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import proctor
from proctor._wasi import confined, unconfined

# The folders of the plugins load imported: what a confined plugin may read
# besides the SDK and the standard library (the runtime's /app).
_plugin_dirs = []

_RESPONSES = {
    proctor.HOOK_DESCRIBE: proctor.Manifest,
    proctor.HOOK_TASKS: proctor.TasksResponse,
    proctor.HOOK_PROMPT: proctor.PromptResponse,
    proctor.HOOK_SANDBOX: proctor.SandboxSpec,
    proctor.HOOK_VERIFY: proctor.VerifyResponse,
    proctor.HOOK_ORACLE: proctor.OracleResponse,
    proctor.HOOK_REWARD: proctor.RewardResponse,
}


class HookError(Exception):
    """A hook that did not answer OK: its status, message and error class."""

    def __init__(self, method: str, status: int, message: str, error_class: str = ""):
        super().__init__(f"{method}: status {status}: {message}")
        self.method = method
        self.status = status
        self.message = message
        self.error_class = error_class


def load(path: str):
    """Import the plugin file at path afresh (it registers its environment
    or scorer, as in the runtime) and return its module. The file's folder
    goes first on sys.path, so the plugin's own modules import as they do
    in the runtime."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "plugin.py")
    folder = os.path.dirname(path)
    name = os.path.splitext(os.path.basename(path))[0]
    if folder not in sys.path:
        sys.path.insert(0, folder)
    if folder not in _plugin_dirs:
        _plugin_dirs.append(folder)
    proctor._env = None
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError(f"load: {path} is not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    with confined(_plugin_dirs):
        spec.loader.exec_module(mod)
    if proctor._env is None:
        raise ImportError(f"load: {path} registered nothing: call proctor.register or proctor.register_reward at import")
    return mod


def _encode_input(request) -> bytes:
    if request is None:
        request = {}
    if isinstance(request, proctor.Message):
        request = request.to_json()
    return json.dumps(request).encode()


def call(method: str, request=None):
    """Run one hook with request (a proctor message or a dict, as JSON) and
    return its decoded response (a proctor message; None for setup and
    teardown). A failed hook raises HookError. The hook runs confined, as
    in the runtime (see proctor._wasi)."""
    data = _encode_input(request)
    with confined(_plugin_dirs):
        status, out = proctor.handle(method, data)
    if status != proctor.STATUS_OK:
        try:
            e = json.loads(out)
        except ValueError:
            e = {"error": out.decode("utf-8", "replace")}
        raise HookError(method, status, e.get("error", ""), e.get("class", ""))
    resp = _RESPONSES.get(method)
    obj = json.loads(out)
    return resp.from_json(obj) if resp else None


def describe() -> proctor.Manifest:
    """The registered plugin's manifest, as the host reads it."""
    return call(proctor.HOOK_DESCRIBE)


# Top-level folders of sandbox paths that exec rewrites under the root,
# as sdktest does.
_REBASED = ("/logs", "/tests", "/solution", "/tmp", "/app", "/work", "/testbed", "/srv")
_REBASE = re.compile("([ (>=])(" + "|".join(map(re.escape, _REBASED)) + ")")


class Host:
    """An emulated proctor host. root stands for the sandbox's "/": absolute
    paths in operations map under it, and commands run with $ROOT set to it
    and their working directory at root + workdir. Use it as a context
    manager (or install/close): while installed, host operations of the
    plugin go to it.

    Attributes a test sets:
      datasets: source → list of rows, for dataset.read
      model: function(messages) → str or proctor.ModelResponse, for
        model.complete (None refuses it)
      reset: function(host), for sandbox.reset: it gets the host with a new,
        empty root to fill as the sandbox's image would be (None refuses it)
      grants: the operations the run grants (default: all the manifest declares)
      info: the proctor.HostInfo host.info answers
      private: the sandbox's private folders; call("rollout.sandbox") sets
        it from the spec's private, and, as the host does, each starts empty
        and is emptied again when call("rollout.verify") starts (the
        emulator has no agent to keep out of them)
    and reads: calls (the operations made, in order), logs ((level, message)).
    """

    def __init__(self, root: str | None = None, workdir: str = "/"):
        self._temps = []
        self.root = root or self._temp()
        self.workdir = workdir
        self.datasets = {}
        self.model = None
        self.reset = None
        self.grants = None
        self.info = proctor.HostInfo(
            proctor_version="testing",
            abi=proctor.ABI_VERSION,
            abi_minor=proctor.ABI_MINOR,
            features=sorted(proctor._V1_0_FEATURES | {proctor.HOOK_CONFIG}),
            backend="emulator",
        )
        self.calls = []
        self.logs = []
        self.private = []
        self._prev = None

    def _temp(self) -> str:
        d = tempfile.mkdtemp(prefix="proctor-testing-")
        self._temps.append(d)
        return d

    def install(self) -> Host:
        self._prev = proctor._set_transport(self._op, self._log)
        return self

    def close(self) -> None:
        if self._prev is not None:
            proctor._set_transport(*self._prev)
            self._prev = None
        for d in self._temps:
            shutil.rmtree(d, ignore_errors=True)
        self._temps = []

    def __enter__(self) -> Host:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method: str, request=None):
        """Run one hook with this host installed (see testing.call)."""
        if self._prev is None:
            with self:
                return self._call(method, request)
        return self._call(method, request)

    def _call(self, method: str, request):
        if method == proctor.HOOK_VERIFY:
            self._empty_private()
        resp = call(method, request)
        if method == proctor.HOOK_SANDBOX:
            self.private = _private_dirs(resp.private)
            self._empty_private()
        return resp

    def _empty_private(self) -> None:
        for d in self.private:
            p = self.path(d)
            shutil.rmtree(p, ignore_errors=True)
            os.makedirs(p)

    def path(self, p: str) -> str:
        """The emulator's file for the sandbox path p."""
        if not p.startswith("/"):
            p = os.path.join(self.workdir, p)
        return os.path.join(self.root, os.path.normpath("/" + p).lstrip("/"))

    # ------------------------------------------------------------ operations

    def _log(self, level: int, message: str) -> None:
        self.logs.append((level, message))

    def _allowed(self) -> set:
        prev = proctor._set_transport(None)
        try:
            m = describe()
        finally:
            proctor._set_transport(*prev)
        declared = set(m.capabilities) | set(m.optional_capabilities)
        if self.grants is not None:
            declared &= set(self.grants)
        return declared

    def _op(self, op: str, req: bytes):
        with unconfined():
            return self._serve(op, req)

    def _serve(self, op: str, req: bytes):
        self.calls.append(op)
        known = {
            proctor.OP_EXEC: self._exec,
            proctor.OP_READ_FILE: self._read_file,
            proctor.OP_WRITE_FILE: self._write_file,
            proctor.OP_UPLOAD: self._upload,
            proctor.OP_DOWNLOAD: self._download,
            proctor.OP_DATASET_READ: self._dataset,
            proctor.OP_MODEL_COMPLETE: self._complete,
            proctor.OP_REPO_CHECKOUT: self._checkout,
            proctor.OP_RESET: self._reset,
            proctor.OP_HOST_INFO: lambda r: self.info,
        }
        fn = known.get(op)
        if fn is None:
            return proctor.STATUS_UNKNOWN, proctor._error_json(f"unknown operation {op!r}")
        if op not in self._allowed():
            return proctor.STATUS_DENIED, proctor._error_json(f"{op} was not declared by the plugin or not granted by the run")
        try:
            resp = fn(json.loads(req))
        except _Refused as e:
            return proctor.STATUS_UNKNOWN, proctor._error_json(str(e))
        except Exception as e:  # noqa: BLE001 - an operation's failure goes back to the plugin
            return proctor.STATUS_ERROR, proctor._error_json(f"{type(e).__name__}: {e}")
        if isinstance(resp, proctor.Message):
            resp = resp.to_json()
        return proctor.STATUS_OK, json.dumps(resp).encode()

    def _exec(self, r: dict) -> proctor.ExecResponse:
        # One pass, as sdktest's strings.Replacer: a path already rebased
        # under the root (itself under /tmp) is not rebased again.
        root = self.root.rstrip("/")
        cmd = _REBASE.sub(lambda m: m.group(1) + root + m.group(2), r.get("cmd", ""))
        wd = self.path(r.get("workdir") or self.workdir)
        os.makedirs(wd, exist_ok=True)
        env = dict(os.environ, ROOT=self.root, **(r.get("env") or {}))
        stdin = proctor._decode(r.get("stdin") or "", "bytes", "stdin")
        timeout = r.get("timeout_ms", 0) / 1000 or None
        start = time.monotonic()
        p = subprocess.Popen(["bash", "-c", cmd], cwd=wd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = p.communicate(stdin, timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            timed_out = True
        return proctor.ExecResponse(
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            exit_code=p.returncode,
            timed_out=timed_out,
            duration_ms=int((time.monotonic() - start) * 1000),
        )

    def _read_file(self, r: dict) -> dict:
        # At most max_bytes from the start (the host's cap when 0 or above
        # it), and the file's size, as the host answers.
        limit = r.get("max_bytes") or 0
        if limit <= 0 or limit > proctor.MAX_READ_FILE:
            limit = proctor.MAX_READ_FILE
        try:
            with open(self.path(r["path"]), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read(limit)
        except FileNotFoundError:
            return {"missing": True}
        size = max(size, len(data))
        out = {"data": proctor._encode(data, None, "bytes", "data"), "size": size}
        if size > len(data):
            out["truncated"] = True
        return out

    def _write_file(self, r: dict) -> dict:
        p = self.path(r["path"])
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(proctor._decode(r.get("data") or "", "bytes", "data"))
        os.chmod(p, r.get("mode") or 0o644)
        return {}

    def _upload(self, r: dict) -> dict:
        data = proctor._decode(r.get("tar") or "", "bytes", "tar")
        dest = self.path(r.get("dir", "/"))
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
            for m in tf.getmembers():
                target = os.path.normpath(os.path.join(dest, m.name.lstrip("/")))
                if not (target + os.sep).startswith(os.path.normpath(dest) + os.sep) or m.islnk() or m.issym():
                    raise ValueError(f"tar entry {m.name!r} leaves the folder or is a link")
                if m.isdir():
                    os.makedirs(target, exist_ok=True)
                elif m.isfile():
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with tf.extractfile(m) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    os.chmod(target, (m.mode & 0o777) | 0o200)
        return {}

    def _download(self, r: dict) -> dict:
        p = self.path(r["path"])
        if not os.path.exists(p):
            raise FileNotFoundError(f"{r['path']}: no such file or folder in the sandbox")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            tf.add(p, arcname=os.path.basename(p.rstrip("/")) or ".")
        return {"tar": proctor._encode(buf.getvalue(), None, "bytes", "tar")}

    def _dataset(self, r: dict) -> dict:
        source = r.get("source", "")
        if source not in self.datasets:
            raise KeyError(f"dataset {source}: not in the emulator's datasets")
        rows = list(self.datasets[source])
        off, limit = r.get("offset", 0), r.get("limit", 0) or 1000
        page = rows[off : off + limit]
        nxt = off + len(page)
        return {"rows": page, "next": nxt, "eof": nxt >= len(rows)}

    def _complete(self, r: dict) -> proctor.ModelResponse:
        if self.model is None:
            raise _Refused("the emulator has no model: set host.model")
        ans = self.model(r.get("messages") or [])
        if isinstance(ans, str):
            ans = proctor.ModelResponse(content=ans)
        return ans

    def _checkout(self, r: dict) -> dict:
        dst = self.path(r["dir"])
        with tempfile.TemporaryDirectory(prefix="proctor-testing-clone-") as tmp:
            script = 'set -e; git clone -q --no-checkout -- "$1" "$2" && cd "$2" && git rev-parse --verify -q "$3^{commit}" && git archive "$3" | (mkdir -p "$4" && tar -x -C "$4")'
            p = subprocess.run(["bash", "-c", script, "checkout", r["url"], tmp + "/repo", r["commit"], dst], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"repo.checkout {r['url']} at {r['commit']}: {p.stderr.strip()}")
        return {"commit": p.stdout.strip()}

    def _reset(self, r: dict) -> dict:
        if self.reset is None:
            raise _Refused("the emulator has no reset: set host.reset")
        self.root = self._temp()
        self.reset(self)
        return {}


def _private_dirs(dirs: list) -> list:
    """The spec's private folders, checked and cleaned as the host does."""
    out = []
    for d in dirs:
        c = os.path.normpath(d) if isinstance(d, str) else d
        if not isinstance(d, str) or not d.startswith("/") or c == "/":
            raise ValueError(f"private folder {d!r}: want an absolute folder other than /")
        out.append(c)
    return out


class _Refused(Exception):
    """An operation the emulator was not given the means to answer."""
