"""proctor's SDK for plugins written in Python.

A plugin is a Python file (or a folder of them) that registers an
environment or a reward scorer when it is imported::

    import proctor

    class Toolstats:
        def manifest(self):
            return proctor.Manifest(name="toolstats", version="1.0.0")

        def score(self, r):
            return proctor.RewardResponse(reward=1.0)

    proctor.register_reward(Toolstats())

``proctor plugin build toolstats.py`` turns it into one ``.wasm`` file:
CPython built for WASI, this SDK and the plugin's files. The host calls
the object's hook methods (``load_tasks``, ``sandbox``, ``setup``,
``prompt``, ``oracle``, ``verify``, ``teardown``, ``score``); hooks reach
the rollout's sandbox and the host with the functions of this module
(``exec``, ``read_file``, ``write_file``, ``upload``, ``download``,
``read_file_head``, ``read_dataset``, ``read_all_rows``, ``info``, ``log``,
``reset_sandbox``,
``repo_checkout``, ``complete``). Natively, ``proctor.testing`` runs the
same hooks against an emulated host.

The names mirror the Go SDK (package sdk) and the wire contract
(sdk/abi/abi.go). This module uses only the standard library and runs on
Python 3.10 and later.
"""

from __future__ import annotations

import json as _json

ABI_VERSION = 1
# The ABI's minor version this SDK speaks (abi.Minor).
ABI_MINOR = 2
# This SDK's version; describe reports it as "python SDK_VERSION".
SDK_VERSION = "0.1.0"

# Status codes (abi.Status*).
STATUS_OK = 0
STATUS_ERROR = 1
STATUS_UNKNOWN = 2
STATUS_DENIED = 3
STATUS_DEADLINE = 4
STATUS_TOO_LARGE = 5
STATUS_BAD_REQUEST = 6

# Hook names (abi.Hook*).
HOOK_DESCRIBE = "describe"
HOOK_TASKS = "tasks.load"
HOOK_PROMPT = "prompt.format"
HOOK_SANDBOX = "rollout.sandbox"
HOOK_SETUP = "rollout.setup"
HOOK_VERIFY = "rollout.verify"
HOOK_ORACLE = "rollout.oracle"
HOOK_TEARDOWN = "rollout.teardown"
HOOK_REWARD = "reward.score"
HOOK_CONFIG = "config.check"
# Every hook name of this minor version (abi.Hooks).
HOOKS = (HOOK_DESCRIBE, HOOK_TASKS, HOOK_PROMPT, HOOK_SANDBOX, HOOK_SETUP, HOOK_VERIFY, HOOK_ORACLE, HOOK_TEARDOWN, HOOK_REWARD, HOOK_CONFIG)

# Error classes (abi.Class*): what the host records a failed hook as. A
# class the host does not know is recorded as CLASS_PLUGIN.
CLASS_PLUGIN = "plugin"
CLASS_SETUP = "setup"
CLASS_VERIFIER = "verifier"
# A dataset row that cannot be graded as it is (v1.2).
CLASS_DATASET = "dataset"
# Every error class of this minor version (abi.Classes).
CLASSES = (CLASS_PLUGIN, CLASS_SETUP, CLASS_VERIFIER, CLASS_DATASET)

# Host operations (abi.Op*): what a manifest declares and a run grants.
OP_EXEC = "sandbox.exec"
OP_READ_FILE = "sandbox.read_file"
OP_WRITE_FILE = "sandbox.write_file"
OP_UPLOAD = "sandbox.upload"
OP_DOWNLOAD = "sandbox.download"
OP_RESET = "sandbox.reset"
OP_DATASET_READ = "dataset.read"
OP_HOST_INFO = "host.info"
OP_REPO_CHECKOUT = "repo.checkout"
OP_MODEL_COMPLETE = "model.complete"
# Every host operation of this minor version (abi.Ops).
OPS = (OP_EXEC, OP_READ_FILE, OP_WRITE_FILE, OP_UPLOAD, OP_DOWNLOAD, OP_RESET, OP_DATASET_READ, OP_HOST_INFO, OP_REPO_CHECKOUT, OP_MODEL_COMPLETE)

# The SandboxSpec.network of a task that needs the internet (abi.NetworkInternet).
NETWORK_INTERNET = "internet"
# The most of VerifyResponse.log and OracleResponse.output the host keeps
# (abi.MaxVerifyLog).
MAX_VERIFY_LOG = 1 << 20
# The most one sandbox.read_file answer holds (abi.MaxReadFile).
MAX_READ_FILE = 16 << 20

# What a host of ABI v1.0, which lists no features, has.
_V1_0_FEATURES = frozenset(HOOKS + OPS) - {HOOK_CONFIG}

# Log levels.
LEVEL_DEBUG = -4
LEVEL_INFO = 0
LEVEL_WARN = 4
LEVEL_ERROR = 8


# ---------------------------------------------------------------- messages


class Message:
    """A message of the wire contract: keyword construction, attribute
    access, JSON through to_json/from_json.

    Each subclass lists its fields in ``_fields`` as (name, default, kind),
    where kind says how the JSON value converts: "" as is, "bytes" (base64
    in JSON), "int" (a whole number, for a field whose None default means
    absent), a Message subclass, or a one-element list of one of those for
    a list. A field's default also gives its type: a str, number, bool,
    list or dict default takes only that, a None default any JSON value.
    Unknown JSON keys from the host are ignored, as the Go host ignores
    them; unknown keys in what a plugin returns are an error.
    """

    __slots__ = ()
    _fields: tuple = ()

    def __init__(self, **kw):
        for name, default, _ in self._fields:
            if name in kw:
                value = kw.pop(name)
            elif isinstance(default, (list, dict)):
                value = type(default)(default)
            else:
                value = default
            object.__setattr__(self, name, value)
        if kw:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(kw))}")

    def __repr__(self):
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n, d, _ in self._fields if getattr(self, n) != d)
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        return type(self) is type(other) and all(getattr(self, n) == getattr(other, n) for n, _, _ in self._fields)

    def to_json(self) -> dict:
        """The JSON object of this message (fields that are None left out),
        checking each field's type."""
        out = {}
        for name, default, kind in self._fields:
            value = getattr(self, name)
            if value is not None:
                out[name] = _encode(value, default, kind, f"{type(self).__name__}.{name}")
        return out

    @classmethod
    def from_json(cls, obj, strict: bool = False):
        """Build the message from a decoded JSON object; strict refuses keys
        the message has no field for."""
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, dict):
            raise ValueError(f"{cls.__name__}: want a JSON object, got {_json_type(obj)}")
        kw = {}
        for name, _, kind in cls._fields:
            if name in obj and obj[name] is not None:
                kw[name] = _decode(obj[name], kind, f"{cls.__name__}.{name}", strict)
        if strict and len(kw) < len(obj):
            known = {f[0] for f in cls._fields}
            extra = sorted(k for k in obj if k not in known)
            if extra:
                raise ValueError(f"{cls.__name__} has no field {', '.join(map(repr, extra))}")
        return cls(**kw)


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _encode(value, default, kind, where):
    if isinstance(kind, list):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{where}: want a list, got {type(value).__name__}")
        return [_encode(v, None, kind[0], where) for v in value]
    if kind == "bytes":
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"{where}: want bytes, got {type(value).__name__}")
        import base64

        return base64.b64encode(bytes(value)).decode("ascii")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: want an int, got {type(value).__name__} {value!r:.60}")
        return value
    if isinstance(kind, type):
        if isinstance(value, dict):
            value = kind.from_json(value, strict=True)
        if not isinstance(value, kind):
            raise TypeError(f"{where}: want proctor.{kind.__name__}, got {type(value).__name__}")
        return value.to_json()
    if default is not None and not _same_type(value, default):
        raise TypeError(f"{where}: want {_py_type(default)}, got {type(value).__name__} {value!r:.60}")
    return value


def _same_type(value, default) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, list):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def _py_type(default) -> str:
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return "a number"
    return {bool: "a bool", str: "a str", list: "a list", dict: "a dict"}.get(type(default), type(default).__name__)


def _decode(value, kind, where, strict=False):
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise ValueError(f"{where}: want an array, got {_json_type(value)}")
        return [_decode(v, kind[0], where, strict) for v in value]
    if kind == "bytes":
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if not isinstance(value, str):
            raise ValueError(f"{where}: want base64 text, got {_json_type(value)}")
        import base64
        import binascii

        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as e:
            raise ValueError(f"{where}: {e}") from None
    if kind == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: want a whole number, got {_json_type(value)}")
        return value
    if isinstance(kind, type):
        return kind.from_json(value, strict)
    return value


def _message(name, doc, fields):
    cls = type(name, (Message,), {"__slots__": tuple(f[0] for f in fields), "_fields": tuple(fields), "__doc__": doc})
    return cls


Manifest = _message(
    "Manifest",
    "What describe returns: the plugin's name and version, the host operations it uses "
    "(capabilities, and optional_capabilities it uses only in some configurations) and a JSON "
    "schema of its config. abi, abi_minor, sdk and hooks are filled in by the SDK.",
    [
        ("name", "", ""),
        ("version", "", ""),
        ("abi", 0, ""),
        ("abi_minor", 0, ""),
        ("sdk", "", ""),
        ("description", "", ""),
        ("hooks", [], ""),
        ("capabilities", [], ""),
        ("optional_capabilities", [], ""),
        ("config_schema", None, ""),
        ("scoring_keys", [], ""),
    ],
)

Task = _message(
    "Task",
    "One task of the environment. data is the plugin's own payload (any JSON value), handed "
    "back untouched in every rollout hook. broken says why the task cannot be run (its "
    "task.toml does not parse, say): the host lists it as broken, and its rollouts still go "
    "through the hooks, which fail with the reason, so each is recorded; empty for a runnable "
    "task.",
    [
        ("id", "", ""),
        ("category", "", ""),
        ("difficulty", "", ""),
        ("tags", [], ""),
        ("agent_timeout_sec", 0, ""),
        ("verify_timeout_sec", 0, ""),
        ("agent_timeout_from", "", ""),
        ("verify_timeout_from", "", ""),
        ("data", None, ""),
        ("broken", "", ""),
    ],
)

Skipped = _message("Skipped", "A task the plugin could not load, and why.", [("id", "", ""), ("reason", "", "")])

TasksResponse = _message(
    "TasksResponse",
    "What load_tasks returns: the tasks, and the ones skipped with their reasons.",
    [("tasks", [], [Task]), ("skipped", [], [Skipped])],
)

RolloutRequest = _message(
    "RolloutRequest",
    "The input of the per-rollout hooks. config is the run's [env.config] table (decoded JSON, "
    "None when absent): read it with decode_config.",
    [("task", None, Task), ("config", None, ""), ("rollout_id", "", ""), ("attempt", 0, ""), ("seed", 0, "")],
)

VerifyRequest = _message(
    "VerifyRequest",
    "The input of verify: a RolloutRequest, and whether the agent ran out of time.",
    [f for f in RolloutRequest._fields] + [("agent_timed_out", False, "")],
)

PromptResponse = _message("PromptResponse", "The agent's prompt.", [("system", "", ""), ("user", "", "")])

SandboxSpec = _message(
    "SandboxSpec",
    "The sandbox a rollout needs: an image, or a build context (a tar, as bytes) with a "
    "Dockerfile (used when image is empty or force_build is set); workdir and env; user, the "
    "user the plugin's commands (the verifier's among them) run as, and agent_user, the one the "
    "agent's commands run as when it is not user (empty: user); resources: cpus, memory_mb, "
    "pids_max, disk_mb (what the sandbox may write) and disk_inodes (how many files, folders "
    "and links it may make; 0 leaves the run's limit); build_timeout_sec bounds starting the "
    "sandbox, building its image included (0 leaves the run's sandbox start timeout); network "
    "says what the task needs: \"\" or \"none\" no network, NETWORK_INTERNET the internet (the "
    "run decides how it is given; \"host\" is read as NETWORK_INTERNET). private lists absolute "
    "folders only the plugin's own operations see: the verifier's tests and its output. Each "
    "starts empty, is emptied again when verification starts, and is out of reach of everything "
    "the agent runs; a backend that cannot keep them apart refuses the spec.",
    [
        ("image", "", ""),
        ("build_context", b"", "bytes"),
        ("dockerfile", "", ""),
        ("force_build", False, ""),
        ("workdir", "", ""),
        ("env", {}, ""),
        ("user", "", ""),
        ("agent_user", "", ""),
        ("cpus", 0, ""),
        ("memory_mb", 0, ""),
        ("pids_max", 0, ""),
        ("disk_mb", 0, ""),
        ("disk_inodes", 0, ""),
        ("build_timeout_sec", 0, ""),
        ("build_timeout_from", "", ""),
        ("build_hint", "", ""),
        ("network", "", ""),
        ("private", [], ""),
    ],
)

TestResult = _message(
    "TestResult",
    "One test's outcome: status is passed, failed, skipped or error.",
    [("name", "", ""), ("status", "", ""), ("message", "", "")],
)
TestResult.__test__ = False  # not a test case, whatever pytest thinks of the name

VerifyResponse = _message(
    "VerifyResponse",
    "The verdict: reward, passed, named scores and per-test results; output is the tail of the "
    "verifier's output, for humans, log its whole output (at most MAX_VERIFY_LOG bytes: a longer "
    "one keeps its head and tail), which the host keeps in the run directory, and reward_source "
    "names where the reward came from (a file, say). reward and every score are finite and "
    "within ±1e6.",
    [
        ("reward", 0.0, ""),
        ("passed", False, ""),
        ("failure", "", ""),
        ("scores", {}, ""),
        ("tests", [], [TestResult]),
        ("output", "", ""),
        ("log", "", ""),
        ("reward_source", "", ""),
    ],
)

OracleResponse = _message(
    "OracleResponse",
    "How applying the reference solution went: what it printed (at most MAX_VERIFY_LOG bytes) "
    "and, when it ran to its end, its exit code (None, left out of the JSON, when it did not).",
    [("output", "", ""), ("exit_code", None, "int"), ("timed_out", None, "")],
)

RewardRequest = _message(
    "RewardRequest",
    "The input of a reward plugin: the task, the run's [reward.config] (decoded), the rollout's "
    "transcript (decoded JSON: task_id, prompt, trajectory with messages and turns, ...) and "
    "the environment's verdict.",
    [("task", None, Task), ("config", None, ""), ("trajectory", None, ""), ("verify", None, VerifyResponse)],
)

RewardResponse = _message(
    "RewardResponse",
    "A reward plugin's verdict: reward (what the run weighs and adds up) and named scores.",
    [("reward", 0.0, ""), ("scores", {}, "")],
)

ExecResponse = _message(
    "ExecResponse",
    "What a command did. A non-zero exit_code is not an error.",
    [
        ("stdout", "", ""),
        ("stderr", "", ""),
        ("exit_code", 0, ""),
        ("timed_out", False, ""),
        ("oom_killed", False, ""),
        ("truncated", False, ""),
        ("duration_ms", 0, ""),
    ],
)

DatasetResponse = _message(
    "DatasetResponse",
    "One page of dataset rows (decoded JSON); next is the offset of the next page, eof is set "
    "on the last. A row the host could not read (not JSON, over abi.MaxRow) is None in rows, "
    "and errors says why: a list of {\"row\": N, \"error\": \"...\"}, N the row's offset.",
    [("rows", [], ""), ("next", 0, ""), ("eof", False, ""), ("errors", [], "")],
)

HostInfo = _message(
    "HostInfo",
    "Where the plugin runs.",
    [
        ("proctor_version", "", ""),
        ("abi", 0, ""),
        ("abi_minor", 0, ""),
        ("features", [], ""),
        ("backend", "", ""),
        ("run_id", "", ""),
        ("rollout_id", "", ""),
        ("seed", 0, ""),
    ],
)



def _host_has(self, feature: str) -> bool:
    """Whether the host has the feature (a hook or an operation name); a
    host older than ABI v1.1 lists none and has exactly v1.0's."""
    if not self.abi_minor and not self.features:
        return feature in _V1_0_FEATURES
    return feature in self.features


HostInfo.has = _host_has

ModelResponse = _message(
    "ModelResponse",
    "The model's answer to complete, with its token usage.",
    [("content", "", ""), ("prompt_tokens", 0, ""), ("completion_tokens", 0, "")],
)


# ---------------------------------------------------------------- errors


class Error(Exception):
    """A hook failure the host records with a class: raise it to say what
    kind of infrastructure error a failure is ("setup", "verifier", ...).
    Without a class, the failure takes the hook's own phase. Any other
    exception a hook lets out is a bug in the plugin: class "plugin", with
    the traceback's last frames in the message."""

    def __init__(self, message: str, error_class: str = ""):
        super().__init__(message)
        self.message = message
        self.error_class = error_class


class SetupError(Error):
    """A failure to set a task up (class "setup")."""

    def __init__(self, message: str):
        super().__init__(message, CLASS_SETUP)


class VerifierError(Error):
    """A verifier that could not reach a verdict (class "verifier")."""

    def __init__(self, message: str):
        super().__init__(message, CLASS_VERIFIER)


class HostError(Exception):
    """A host operation that failed: op, the status code and the host's message."""

    def __init__(self, op: str, status: int, message: str):
        super().__init__(f"host {op}: {message}")
        self.op = op
        self.status = status
        self.message = message


class DeniedError(HostError):
    """The host refused an operation the plugin did not declare or the run
    did not grant (status 3)."""


class FileTooLargeError(OSError):
    """A sandbox file larger than what was read of it (the Go SDK's
    ErrTooLarge): path, its size, and how many bytes came back."""

    def __init__(self, path: str, size: int, read: int):
        super().__init__(f"read {path}: {size} bytes, more than the {read} read: read it with read_file_head")
        self.path = path
        self.size = size
        self.read = read


class ConfigError(ValueError):
    """A config table that does not fit its schema; the message names the key."""


# ---------------------------------------------------------------- registration

_env = None


def register(env) -> None:
    """Make env the plugin's environment. Call it when the plugin's module
    is imported. env has manifest() and load_tasks(config), and any of the
    hooks sandbox, setup, prompt, oracle, verify, teardown, score."""
    for need in ("manifest", "load_tasks"):
        if not callable(getattr(env, need, None)):
            raise TypeError(f"register: {type(env).__name__} has no {need}() method")
    global _env
    _env = env


class _RewardOnly:
    def __init__(self, scorer):
        self.scorer = scorer

    def manifest(self):
        return self.scorer.manifest()

    def load_tasks(self, config):
        raise Error("this is a reward plugin, which has no tasks: name it in a [[reward]] table, not in [env]")

    def score(self, r):
        return self.scorer.score(r)

    def __getattr__(self, name):
        # check_config, when the scorer has it.
        if name == "check_config":
            return getattr(self.scorer, name)
        raise AttributeError(name)


def register_reward(scorer) -> None:
    """Make scorer the plugin's reward scorer, for a plugin that has no
    environment of its own: it has manifest() and score(r)."""
    for need in ("manifest", "score"):
        if not callable(getattr(scorer, need, None)):
            raise TypeError(f"register_reward: {type(scorer).__name__} has no {need}() method")
    global _env
    _env = _RewardOnly(scorer)


# Hook name → (method name, request type, response type); None: no input or output.
_HOOKS = {
    HOOK_TASKS: ("load_tasks", None, TasksResponse),
    HOOK_PROMPT: ("prompt", RolloutRequest, PromptResponse),
    HOOK_SANDBOX: ("sandbox", RolloutRequest, SandboxSpec),
    HOOK_SETUP: ("setup", RolloutRequest, None),
    HOOK_VERIFY: ("verify", VerifyRequest, VerifyResponse),
    HOOK_ORACLE: ("oracle", RolloutRequest, OracleResponse),
    HOOK_TEARDOWN: ("teardown", RolloutRequest, None),
    HOOK_REWARD: ("score", RewardRequest, RewardResponse),
    HOOK_CONFIG: ("check_config", None, None),
}


def _hooks(env) -> list:
    if isinstance(env, _RewardOnly):
        hooks = [HOOK_DESCRIBE, HOOK_REWARD]
        if callable(getattr(env.scorer, "check_config", None)):
            hooks.append(HOOK_CONFIG)
        return hooks
    hooks = [HOOK_DESCRIBE, HOOK_TASKS]
    for hook in (HOOK_PROMPT, HOOK_SANDBOX, HOOK_SETUP, HOOK_VERIFY, HOOK_ORACLE, HOOK_TEARDOWN, HOOK_REWARD, HOOK_CONFIG):
        if callable(getattr(env, _HOOKS[hook][0], None)):
            hooks.append(hook)
    return hooks


# ---------------------------------------------------------------- dispatch


def handle(method: str, data: bytes) -> tuple:
    """Run one hook: method and its JSON input in, (status, JSON output)
    out. The wasm runtime and proctor.testing both call it; plugins do not.
    It never raises: a failure is an error object."""
    try:
        return _handle(method, data)
    except BaseException as e:  # noqa: BLE001 - the plugin's bug is reported, not raised
        return STATUS_ERROR, _failure(method, e)


def _handle(method, data):
    env = _env
    if env is None:
        return STATUS_ERROR, _error_json("no environment registered: call proctor.register or proctor.register_reward when the plugin's module is imported", CLASS_PLUGIN)
    if method == HOOK_DESCRIBE:
        m = env.manifest()
        if isinstance(m, dict):
            m = Manifest.from_json(m, strict=True)
        if not isinstance(m, Manifest):
            raise TypeError(f"manifest() returned {type(m).__name__}; want proctor.Manifest")
        out = m.to_json()
        out["abi"] = ABI_VERSION
        out["abi_minor"] = ABI_MINOR
        out["sdk"] = "python " + SDK_VERSION
        out["hooks"] = _hooks(env)
        return STATUS_OK, _dumps(out)
    hook = _HOOKS.get(method)
    fn = getattr(env, hook[0], None) if hook else None
    if not callable(fn):
        if method in (HOOK_SETUP, HOOK_TEARDOWN):
            return STATUS_OK, b"{}"
        return STATUS_UNKNOWN, _error_json(f"plugin does not implement {method}")
    name, req_type, resp_type = hook
    try:
        obj = _json.loads(data) if data else {}
        if req_type is None:
            if not isinstance(obj, dict):
                raise ValueError(f"want a JSON object, got {_json_type(obj)}")
            arg = obj.get("config")
        else:
            arg = req_type.from_json(obj)
    except ValueError as e:
        return STATUS_BAD_REQUEST, _error_json(f"bad input: {e}")
    try:
        res = fn(arg)
    except Error as e:
        return STATUS_ERROR, _error_json(e.message, e.error_class)
    except ConfigError as e:
        if method != HOOK_CONFIG:
            raise
        # What config.check is for: the message alone, naming the key.
        return STATUS_ERROR, _error_json(str(e))
    if resp_type is None:
        return STATUS_OK, b"{}"
    if isinstance(res, dict):
        res = resp_type.from_json(res, strict=True)
    if not isinstance(res, resp_type):
        raise TypeError(f"{name}() returned {type(res).__name__}; want proctor.{resp_type.__name__}")
    return STATUS_OK, _dumps(res.to_json())


_encoder = _json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _dumps(obj) -> bytes:
    try:
        return _encoder.encode(obj).encode()
    except ValueError as e:
        # NaN and infinities have no JSON form.
        raise ValueError(f"cannot be JSON: {e}") from None


def _error_json(message: str, error_class: str = "") -> bytes:
    e = {"error": message}
    if error_class:
        e["class"] = error_class
    return _json.dumps(e, ensure_ascii=False).encode()


# How many of a traceback's frames an error names, last first.
TRACEBACK_FRAMES = 5


def _failure(method: str, e: BaseException) -> bytes:
    """An exception a hook let out: class plugin, its type, message and the
    traceback's last frames (the SDK's own frames left out)."""
    return _error_json(describe_exception(f"{method}: uncaught", e), CLASS_PLUGIN)


def describe_exception(prefix: str, e: BaseException) -> str:
    """prefix, the exception's type and message, and the last frames of its
    traceback outside the SDK, innermost last, as Python prints them."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if not _sdk_file(f.filename)]
    lines = [f"{prefix} {type(e).__name__}: {e}".rstrip(": ")]
    if isinstance(e, SyntaxError) and e.filename:
        # Where the source does not parse: its own line, not a frame.
        lines.append(f'  File "{_short(e.filename)}", line {e.lineno}')
        if e.text:
            lines.append(f"    {e.text.strip()}")
        return "\n".join(lines)
    if frames:
        shown = frames[-TRACEBACK_FRAMES:]
        more = len(frames) - len(shown)
        lines.append(f"Traceback (last {len(shown)} of {len(frames)} frames):" if more else "Traceback:")
        for f in shown:
            lines.append(f'  File "{_short(f.filename)}", line {f.lineno}, in {f.name}')
            if f.line:
                lines.append(f"    {f.line.strip()}")
    return "\n".join(lines)


_here = __file__.rsplit("/", 1)[0] + "/"


def _sdk_file(path: str) -> bool:
    return path.startswith(_here)


def _short(path: str) -> str:
    # The plugin's own files sit under /app in the wasm runtime.
    return path[len("/app/") :] if path.startswith("/app/") else path


# ---------------------------------------------------------------- host calls

# The transport to the host: a function (op, request bytes) → (status,
# response bytes). The wasm runtime installs the real one; proctor.testing
# installs an emulator.
_transport = None
_logger = None


def _set_transport(call, log=None):
    """Install a host transport and log function; returns the previous pair.
    For the runtime and proctor.testing, not for plugins."""
    global _transport, _logger
    prev = (_transport, _logger)
    _transport, _logger = call, log
    return prev


def _call(op: str, req, resp_type=None):
    if _transport is None:
        raise HostError(op, STATUS_ERROR, "no host: natively, run hooks under proctor.testing.Host")
    if isinstance(req, Message):
        req = req.to_json()
    status, out = _transport(op, _dumps(req))
    if status != STATUS_OK:
        try:
            msg = _json.loads(out).get("error") or ""
        except (ValueError, AttributeError):
            msg = ""
        msg = msg or out.decode("utf-8", "replace")
        cls = DeniedError if status == STATUS_DENIED else HostError
        raise cls(op, status, msg)
    if resp_type is None:
        return None
    try:
        return resp_type.from_json(_json.loads(out))
    except ValueError as e:
        raise HostError(op, STATUS_ERROR, f"bad response: {e}") from None


_ExecRequest = _message(
    "_ExecRequest",
    "",
    [
        ("cmd", "", ""),
        ("timeout_ms", 0, ""),
        ("workdir", "", ""),
        ("env", {}, ""),
        ("stdin", b"", "bytes"),
        ("max_output", 0, ""),
    ],
)


def exec(cmd: str, *, timeout_ms: int = 0, workdir: str = "", env: dict | None = None, stdin: bytes = b"", max_output: int = 0) -> ExecResponse:  # noqa: A001 - the Go SDK's name
    """Run cmd with bash in the rollout's sandbox, from the sandbox's
    starting state (the spec's workdir and env, plus env). A non-zero exit
    code is in the response, not an error."""
    req = _ExecRequest(cmd=cmd, timeout_ms=timeout_ms, workdir=workdir, env=env or {}, stdin=stdin, max_output=max_output)
    return _call(OP_EXEC, req, ExecResponse)


_ReadFileResponse = _message(
    "_ReadFileResponse",
    "",
    [("data", b"", "bytes"), ("missing", False, ""), ("size", 0, ""), ("truncated", False, "")],
)


def read_file(path: str) -> bytes:
    """Read a whole file from the sandbox. A missing file raises
    FileNotFoundError; a file over the host's cap (MAX_READ_FILE, 16 MiB)
    raises FileTooLargeError: read such files with read_file_head."""
    data, size = read_file_head(path)
    if size > len(data):
        raise FileTooLargeError(path, size, len(data))
    return data


def read_file_head(path: str, max_bytes: int = 0) -> tuple:
    """Read at most max_bytes of a file from its start (the host's cap,
    MAX_READ_FILE, when 0) and return (data, size), size being the whole
    file's: size > len(data) means the rest was left out. A missing file
    raises FileNotFoundError."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"read_file_head: max_bytes is a whole number of bytes, 0 or more, not {max_bytes!r:.60}")
    req = {"path": path}
    if max_bytes:
        req["max_bytes"] = max_bytes
    r = _call(OP_READ_FILE, req, _ReadFileResponse)
    if r.missing:
        raise FileNotFoundError(2, "no such file in the sandbox", path)
    # A host older than ABI v1.1 sends no size: the data is the file.
    return r.data, max(r.size, len(r.data))


def write_file(path: str, data: bytes | str, mode: int = 0) -> None:
    """Write a file in the sandbox, creating parent folders (str is written as UTF-8)."""
    _call(OP_WRITE_FILE, {"path": path, "data": _encode(data, None, "bytes", "data"), **({"mode": mode} if mode else {})})


def upload(dir: str, tar: bytes) -> None:  # noqa: A002 - the Go SDK's name
    """Extract a tar archive (optionally gzipped) into dir in the sandbox."""
    _call(OP_UPLOAD, {"dir": dir, "tar": _encode(tar, None, "bytes", "tar")})


_DownloadResponse = _message("_DownloadResponse", "", [("tar", b"", "bytes")])


def download(path: str) -> bytes:
    """A sandbox path as a tar archive."""
    return _call(OP_DOWNLOAD, {"path": path}, _DownloadResponse).tar


def reset_sandbox() -> None:
    """Replace the rollout's sandbox with a fresh one from the same spec;
    later sandbox operations act on the new one (capability sandbox.reset)."""
    _call(OP_RESET, {})


_RepoCheckoutResponse = _message("_RepoCheckoutResponse", "", [("commit", "", "")])


def repo_checkout(url: str, commit: str, dir: str) -> str:  # noqa: A002
    """Put the repository at url, at commit, into dir in the sandbox, through
    the host's repository cache; returns the commit checked out
    (capability repo.checkout, which the run must grant)."""
    return _call(OP_REPO_CHECKOUT, {"url": url, "commit": commit, "dir": dir}, _RepoCheckoutResponse).commit


def read_dataset(source: str, split: str = "", offset: int = 0, limit: int = 0, columns: list | None = None) -> DatasetResponse:
    """One page of a dataset's rows, read by the host (capability dataset.read)."""
    req = {"source": source}
    for k, v in (("split", split), ("offset", offset), ("limit", limit), ("columns", columns)):
        if v:
            req[k] = v
    return _call(OP_DATASET_READ, req, DatasetResponse)


def read_all_rows(source: str, split: str = "") -> list:
    """Every row of a dataset, page by page. A row the host could not read is None (one bad
    row fails only itself); read_dataset's errors say why."""
    rows, off = [], 0
    while True:
        page = read_dataset(source, split, offset=off)
        rows.extend(page.rows)
        if page.eof or page.next <= off:
            return rows
        off = page.next


def info() -> HostInfo:
    """Where the plugin runs (capability host.info)."""
    return _call(OP_HOST_INFO, {}, HostInfo)


def complete(messages: list) -> ModelResponse:
    """One chat completion through the run's model, for judges: messages are
    {"role", "content"} dicts (capability model.complete, which the run
    must grant; the plugin never sees the key)."""
    msgs = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise TypeError(f"complete: each message is a dict with string role and content, not {m!r:.80}")
        msgs.append({"role": m["role"], "content": m["content"]})
    return _call(OP_MODEL_COMPLETE, {"messages": msgs}, ModelResponse)


# The level names log takes, as slog names them.
_LEVELS = {"debug": LEVEL_DEBUG, "info": LEVEL_INFO, "warn": LEVEL_WARN, "warning": LEVEL_WARN, "error": LEVEL_ERROR}


def log(level: int | str, message: str) -> None:
    """A line in the host's log: log("info", "scored 3 tests"). level is a
    name ("debug", "info", "warn" or "warning", "error") or one of
    LEVEL_DEBUG, LEVEL_INFO, LEVEL_WARN, LEVEL_ERROR. proctor shows warn and
    error by default, debug and info with --log-level."""
    if isinstance(level, str):
        name = level
        level = _LEVELS.get(name.strip().lower())
        if level is None:
            raise ValueError(f"log: unknown level {name!r}: want one of {', '.join(_LEVELS)} or a proctor.LEVEL_* number")
    elif isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"log: level is a name or a proctor.LEVEL_* number, not {type(level).__name__}")
    if _logger is not None:
        _logger(level, str(message))


# ---------------------------------------------------------------- config


def decode_config(raw, schema):
    """Decode a run's config table ([env.config] or [reward.config], as the
    hook got it) into a new instance of schema, strictly: a key schema has
    no field for is a ConfigError that names it, so a misspelt key is never
    silently ignored, and so is a value of the wrong type.

    schema is a class whose annotated class attributes are the keys and
    their defaults (a dataclass works too)::

        class Config:
            rubric: str = "Did the agent solve the task?"
            max_chars: int = 20000

    Types understood: str, int, float, bool, list, dict, list[T],
    dict[str, T], T | None, Optional[T], Any and nested schema classes. An
    empty or None config gives the defaults.
    """
    from proctor import _config

    return _config.decode(raw, schema)
