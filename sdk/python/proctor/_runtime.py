"""The wasm runtime's side of the SDK. The C glue of proctor's Python
runtime (sdk/python/runtime/proctor_runtime.c) imports this module when the
interpreter starts and calls handle(method, input) for every hook. The
first call imports the plugin's entry module, named in /proctor.json,
which registers the plugin's environment or scorer.

`proctor plugin build` calls the method INIT once and keeps the memory
that leaves (the interpreter started, the plugin imported) as the plugin's
memory image: every instance starts from it. The random module, which the
image would otherwise start in the same state everywhere, is reseeded from
the instance's own random source (seeded per rollout) before its first
hook."""

import gc
import json
import sys

import _proctor  # built into the runtime: the proctor_v1 host functions

import proctor


def _at_import(op: str, req: bytes) -> tuple:
    """The host transport until the first hook: the plugin is imported once,
    when it is built, for every rollout, so an import has no rollout to act on."""
    msg = f"{op} at import: the plugin is imported once, when it is built, with no rollout; make host calls in hooks"
    return proctor.STATUS_ERROR, json.dumps({"error": msg}).encode()


proctor._set_transport(_at_import, _proctor.log)

_CONFIG = "/proctor.json"
_loaded = None  # None before the first hook, then b"" or the import's error
_fresh = True  # no hook has run on this instance yet

# INIT starts the plugin without running a hook: the build's snapshot point.
INIT = "proctor.init"


def _load() -> bytes:
    entry = "?"
    try:
        with open(_CONFIG, encoding="utf-8") as f:
            entry = json.load(f)["entry"]
        __import__(entry)
    except BaseException as e:  # noqa: BLE001 - any failure of the plugin's import is reported
        return proctor._error_json(proctor.describe_exception(f"import {entry}: uncaught", e), "plugin")
    finally:
        sys.stdout.flush()
    return b""


def handle(method: str, data: bytes) -> tuple:
    global _loaded, _fresh
    if _loaded is None:
        _loaded = _load()
    if _loaded:
        return proctor.STATUS_ERROR, _loaded
    if method == INIT:
        # What a failing hook needs to describe itself, imported now, so
        # that it costs nothing in a rollout.
        import traceback  # noqa: F401

        # What import left behind is permanent: the collector need not
        # walk it again in every rollout.
        gc.collect()
        gc.freeze()
        return proctor.STATUS_OK, b"{}"
    if _fresh:
        _fresh = False
        proctor._set_transport(_proctor.call, _proctor.log)
        rnd = sys.modules.get("random")
        if rnd is not None:
            rnd.seed()
    return proctor.handle(method, data)
