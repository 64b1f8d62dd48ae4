"""Tests of the Python SDK and its native harness, under the machine's
CPython (3.10 or later):

    PYTHONPATH=sdk/python python3 -m unittest discover -s sdk/python/tests

The wasm side (the same dispatch inside the runtime, under the real host)
is tested by the Go tests of host/plugin/wasm (python_test.go)."""

import base64
import io
import json
import os
import tarfile
import unittest
from dataclasses import dataclass, field
from typing import Optional

import proctor
from proctor import testing


def call_raw(method, obj):
    status, out = proctor.handle(method, json.dumps(obj).encode())
    return status, json.loads(out)


class Env:
    def __init__(self):
        self.seen = []

    def manifest(self):
        return proctor.Manifest(name="t", version="0.1", capabilities=[proctor.OP_EXEC, proctor.OP_READ_FILE, proctor.OP_WRITE_FILE, proctor.OP_UPLOAD, proctor.OP_DOWNLOAD, proctor.OP_HOST_INFO], optional_capabilities=[proctor.OP_RESET, proctor.OP_DATASET_READ])

    def load_tasks(self, config):
        self.seen.append(config)
        return proctor.TasksResponse(tasks=[proctor.Task(id="a", data={"n": 1})])

    def sandbox(self, r):
        self.seen.append(r)
        return proctor.SandboxSpec(image="img", build_context=b"\x00tar", env={"A": "1"})

    def verify(self, r):
        self.seen.append(r)
        return {"reward": 0.25, "passed": False, "tests": [{"name": "x", "status": "failed"}]}


class TestDispatch(unittest.TestCase):
    def setUp(self):
        self.env = Env()
        proctor.register(self.env)

    def test_describe(self):
        status, m = call_raw("describe", {})
        self.assertEqual(status, proctor.STATUS_OK)
        self.assertEqual(m["abi"], 1)
        self.assertEqual(m["abi_minor"], proctor.ABI_MINOR)
        self.assertEqual(m["sdk"], "python " + proctor.SDK_VERSION)
        self.assertEqual(m["hooks"], ["describe", "tasks.load", "rollout.sandbox", "rollout.verify"])
        self.assertEqual(m["optional_capabilities"], ["sandbox.reset", "dataset.read"])
        self.assertNotIn("config_schema", m)

    def test_requests_and_responses(self):
        status, out = call_raw("tasks.load", {"config": {"k": [1]}})
        self.assertEqual((status, out), (0, {"tasks": [{"id": "a", "category": "", "difficulty": "", "tags": [], "agent_timeout_sec": 0, "verify_timeout_sec": 0, "agent_timeout_from": "", "verify_timeout_from": "", "data": {"n": 1}, "broken": ""}], "skipped": []}))
        self.assertEqual(self.env.seen[-1], {"k": [1]})

        req = {"task": {"id": "a", "data": {"n": 1}, "new_field": 1}, "config": None, "rollout_id": "a#0", "seed": 7, "unknown": True}
        status, spec = call_raw("rollout.sandbox", req)
        self.assertEqual(status, 0)
        self.assertEqual(base64.b64decode(spec["build_context"]), b"\x00tar")
        r = self.env.seen[-1]
        self.assertIsInstance(r, proctor.RolloutRequest)
        self.assertEqual((r.task.id, r.task.data, r.rollout_id, r.seed, r.config), ("a", {"n": 1}, "a#0", 7, None))

        status, v = call_raw("rollout.verify", dict(req, agent_timed_out=True))
        self.assertEqual(status, 0)
        self.assertEqual(v["reward"], 0.25)
        self.assertEqual(v["tests"], [{"name": "x", "status": "failed", "message": ""}])
        self.assertTrue(self.env.seen[-1].agent_timed_out)

    def test_unimplemented(self):
        self.assertEqual(call_raw("prompt.format", {})[0], proctor.STATUS_UNKNOWN)
        self.assertEqual(call_raw("reward.score", {})[0], proctor.STATUS_UNKNOWN)
        self.assertEqual(call_raw("no.such", {})[0], proctor.STATUS_UNKNOWN)
        # setup and teardown are optional: nothing to do is success.
        self.assertEqual(proctor.handle("rollout.setup", b"{}"), (0, b"{}"))
        self.assertEqual(proctor.handle("rollout.teardown", b"{}"), (0, b"{}"))

    def test_bad_input(self):
        for data in (b"{", b"[]", json.dumps({"task": "x"}).encode(), json.dumps({"task": {"id": "a"}, "seed": 1, "build_context": 1}).encode()[:-3]):
            status, out = proctor.handle("rollout.sandbox", data)
            self.assertEqual(status, proctor.STATUS_BAD_REQUEST, data)
            self.assertIn("bad input", json.loads(out)["error"])

    def test_bad_output_is_the_plugins_bug(self):
        cases = [
            (lambda r: {"reward": "1"}, "VerifyResponse.reward: want a number, got str"),
            (lambda r: {"rewrad": 1}, "VerifyResponse has no field 'rewrad'"),
            (lambda r: proctor.PromptResponse(user="x"), "want proctor.VerifyResponse"),
            (lambda r: proctor.VerifyResponse(reward=float("nan")), "cannot be JSON"),
            (lambda r: proctor.VerifyResponse(tests=[{"name": 3}]), "TestResult.name: want a str"),
        ]
        for fn, want in cases:
            self.env.verify = fn
            status, out = call_raw("rollout.verify", {"task": {"id": "a"}})
            self.assertEqual(status, proctor.STATUS_ERROR)
            self.assertEqual(out["class"], "plugin")
            self.assertIn(want, out["error"])

    def test_errors_and_classes(self):
        def boom(r):
            return helper(r)

        def helper(r):
            return {}["missing"]

        cases = [
            (proctor.Error("plain"), "plain", None),
            (proctor.Error("classed", "setup"), "classed", "setup"),
            (proctor.VerifierError("no verdict"), "no verdict", "verifier"),
            (proctor.SetupError("no image"), "no image", "setup"),
        ]
        for exc, msg, cls in cases:

            def raise_it(r, exc=exc):
                raise exc

            self.env.verify = raise_it
            status, out = call_raw("rollout.verify", {"task": {"id": "a"}})
            self.assertEqual((status, out.get("error"), out.get("class")), (proctor.STATUS_ERROR, msg, cls))

        self.env.verify = boom
        status, out = call_raw("rollout.verify", {"task": {"id": "a"}})
        self.assertEqual((status, out["class"]), (proctor.STATUS_ERROR, "plugin"))
        lines = out["error"].splitlines()
        self.assertEqual(lines[0], "rollout.verify: uncaught KeyError: 'missing'")
        self.assertEqual(lines[1], "Traceback:")
        self.assertRegex(lines[2], r'File ".*test_sdk.py", line \d+, in boom')
        self.assertEqual(lines[3].strip(), "return helper(r)")
        self.assertRegex(lines[4], r"in helper$")
        self.assertNotIn("__init__.py", out["error"], "the SDK's own frames are left out")

    def test_traceback_keeps_the_last_frames(self):
        def deep(n):
            if n == 0:
                raise RuntimeError("bottom")
            return deep(n - 1)

        self.env.verify = lambda r: deep(20)
        _, out = call_raw("rollout.verify", {"task": {"id": "a"}})
        self.assertIn(f"Traceback (last {proctor.TRACEBACK_FRAMES} of 22 frames):", out["error"])
        self.assertEqual(out["error"].count("in deep"), proctor.TRACEBACK_FRAMES)
        self.assertTrue(out["error"].endswith('raise RuntimeError("bottom")'))

    def test_syntax_errors_name_the_line(self):
        try:
            compile("x = 1\ndef f(:\n", "/app/broken.py", "exec")
        except SyntaxError as e:
            text = proctor.describe_exception("import broken: uncaught", e)
        self.assertEqual(text.splitlines()[1:], ['  File "broken.py", line 2', "    def f(:"])

    def test_exits_and_memory_errors_are_reported(self):
        import sys

        for fn, want in ((lambda r: sys.exit(3), "uncaught SystemExit: 3"), (lambda r: [0] * (1 << 62), "uncaught MemoryError"), (lambda r: (_ for _ in ()).throw(KeyboardInterrupt), "KeyboardInterrupt")):
            self.env.verify = fn
            status, out = call_raw("rollout.verify", {"task": {"id": "a"}})
            self.assertEqual((status, out["class"]), (proctor.STATUS_ERROR, "plugin"))
            self.assertIn(want, out["error"])

    def test_config_check(self):
        class Config:
            weight: float = 1.0

        class Checked(Env):
            def check_config(self, config):
                proctor.decode_config(config, Config)

        class Scorer:
            def manifest(self):
                return proctor.Manifest(name="s", version="1")

            def score(self, r):
                return proctor.RewardResponse()

            def check_config(self, config):
                proctor.decode_config(config, Config)

        for register, obj, hooks in (
            (proctor.register, Checked(), ["describe", "tasks.load", "rollout.sandbox", "rollout.verify", "config.check"]),
            (proctor.register_reward, Scorer(), ["describe", "reward.score", "config.check"]),
        ):
            register(obj)
            self.assertEqual(call_raw("describe", {})[1]["hooks"], hooks)
            self.assertEqual(call_raw("config.check", {"config": {"weight": 2}}), (proctor.STATUS_OK, {}))
            status, e = call_raw("config.check", {"config": {"wieght": 2}})
            self.assertEqual(status, proctor.STATUS_ERROR)
            self.assertTrue(e["error"].startswith("unknown key 'wieght'; did you mean 'weight'?"), e)
            self.assertNotIn("Traceback", e["error"])
        proctor.register_reward(Scorer.__new__(type("Plain", (), {"manifest": Scorer.manifest, "score": Scorer.score})))
        self.assertEqual(call_raw("describe", {})[1]["hooks"], ["describe", "reward.score"])
        self.assertEqual(call_raw("config.check", {"config": {}})[0], proctor.STATUS_UNKNOWN)

    def test_host_info_has(self):
        old = proctor.HostInfo(abi=1)
        self.assertTrue(old.has(proctor.OP_EXEC))
        self.assertFalse(old.has(proctor.HOOK_CONFIG), "v1.0 had no config.check")
        new = proctor.HostInfo(abi=1, abi_minor=1, features=[proctor.OP_EXEC, proctor.HOOK_CONFIG])
        self.assertTrue(new.has(proctor.HOOK_CONFIG))
        self.assertFalse(new.has(proctor.OP_RESET))

    def test_nothing_registered(self):
        proctor._env = None
        status, out = call_raw("describe", {})
        self.assertEqual(status, proctor.STATUS_ERROR)
        self.assertIn("call proctor.register", out["error"])

    def test_register_checks_the_object(self):
        with self.assertRaisesRegex(TypeError, "no load_tasks"):
            proctor.register(object.__new__(type("E", (), {"manifest": lambda s: None})))
        with self.assertRaisesRegex(TypeError, "no score"):
            proctor.register_reward(object.__new__(type("S", (), {"manifest": lambda s: None})))


class TestMessages(unittest.TestCase):
    def test_round_trip(self):
        v = proctor.VerifyResponse(reward=1, passed=True, scores={"a": 0.5}, tests=[proctor.TestResult(name="t", status="passed")])
        self.assertEqual(proctor.VerifyResponse.from_json(json.loads(json.dumps(v.to_json()))), v)
        self.assertIn("reward=1", repr(v))

    def test_fields_are_fixed(self):
        with self.assertRaisesRegex(TypeError, "no field rewrd"):
            proctor.RewardResponse(rewrd=1)
        a, b = proctor.TasksResponse(), proctor.TasksResponse()
        a.tasks.append(proctor.Task(id="x"))
        self.assertEqual(b.tasks, [], "defaults are not shared")

    def test_bytes(self):
        spec = proctor.SandboxSpec.from_json({"build_context": base64.b64encode(b"abc").decode()})
        self.assertEqual(spec.build_context, b"abc")
        with self.assertRaisesRegex(ValueError, "build_context"):
            proctor.SandboxSpec.from_json({"build_context": "!!"})
        self.assertEqual(proctor.SandboxSpec(build_context="é").to_json()["build_context"], base64.b64encode("é".encode()).decode())


class TestConfig(unittest.TestCase):
    def test_class_schema(self):
        class Inner:
            n: int = 1

        class C:
            name: str = "d"
            ratio: float = 0.5
            on: bool = False
            tags: "list[str]" = []
            limits: "dict[str, int]" = {}
            maybe: "int | None" = None
            inner: Inner = None
            anything: "Any" = None

        c = proctor.decode_config({"name": "x", "ratio": 2, "tags": ["a"], "limits": {"a": 3}, "maybe": 4, "inner": {"n": 5}, "anything": [1]}, C)
        self.assertEqual((c.name, c.ratio, c.on, c.tags, c.limits, c.maybe, c.inner.n, c.anything), ("x", 2.0, False, ["a"], {"a": 3}, 4, 5, [1]))
        d = proctor.decode_config(None, C)
        self.assertEqual((d.name, d.tags, d.maybe), ("d", [], None))
        d.tags.append("z")
        self.assertEqual(proctor.decode_config({}, C).tags, [], "defaults are copied, not shared")

        bad = [
            ({"nmae": "x"}, "unknown key 'nmae'; did you mean 'name'? (known keys: anything, inner, limits, maybe, name, on, ratio, tags)"),
            ({"colour": "x"}, "unknown key 'colour' (known keys: anything,"),
            ({"ratio": "high"}, "ratio: want a number, got a string"),
            ({"on": 1}, "on: want true or false, got a number"),
            ({"tags": "a"}, "tags: want an array, got a string"),
            ({"tags": ["a", 2]}, "tags[1]: want a string, got a number"),
            ({"limits": {"a": "x"}}, "limits.a: want an integer"),
            ({"maybe": "x"}, "maybe: want an integer"),
            ({"inner": {"m": 1}}, "unknown key 'inner.m'"),
            ({"inner": {"nn": 1}}, "unknown key 'inner.nn'; did you mean 'inner.n'?"),
            ([], "config: want a table, got an array"),
        ]
        for raw, want in bad:
            with self.subTest(raw=raw), self.assertRaises(proctor.ConfigError) as e:
                proctor.decode_config(raw, C)
            self.assertIn(want, str(e.exception))

    def test_dataclass_and_typing(self):
        @dataclass
        class D:
            required: str
            items: list = field(default_factory=list)
            opt: Optional[int] = None

        d = proctor.decode_config('{"required": "r", "opt": 2}', D)
        self.assertEqual((d.required, d.items, d.opt), ("r", [], 2))
        with self.assertRaisesRegex(proctor.ConfigError, "missing key 'required'"):
            proctor.decode_config({}, D)
        with self.assertRaisesRegex(proctor.ConfigError, "integer"):
            proctor.decode_config({"required": "r", "opt": 1.5}, D)

    def test_int_accepts_whole_floats(self):
        class C:
            n: int = 0

        self.assertEqual(proctor.decode_config({"n": 3.0}, C).n, 3)
        with self.assertRaises(proctor.ConfigError):
            proctor.decode_config({"n": True}, C)


class Ops:
    def manifest(self):
        return Env().manifest()

    def load_tasks(self, config):
        return proctor.TasksResponse()

    def verify(self, r):
        step = r.task.id
        if step == "exec":
            res = proctor.exec("echo $GREETING > /work/out.txt; cat; echo err >&2; exit 3", env={"GREETING": "hi"}, stdin=b"in")
            return proctor.VerifyResponse(output=json.dumps(res.to_json()))
        if step == "files":
            proctor.write_file("/work/sub/a.txt", "é")
            data = proctor.read_file("sub/a.txt")
            try:
                proctor.read_file("nope")
                missing = "no"
            except FileNotFoundError:
                missing = "yes"
            return proctor.VerifyResponse(output=f"{data.decode()} {missing}")
        if step == "tar":
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tf:
                info = tarfile.TarInfo("d/f.txt")
                info.size = 2
                tf.addfile(info, io.BytesIO(b"ok"))
            proctor.upload("/work", buf.getvalue())
            back = tarfile.open(fileobj=io.BytesIO(proctor.download("/work/d")))
            return proctor.VerifyResponse(output=back.extractfile("d/f.txt").read().decode())
        if step == "denied":
            proctor.complete([{"role": "user", "content": "hi"}])
        if step == "dataset":
            return proctor.VerifyResponse(output=str(len(proctor.read_all_rows("rows"))))
        if step == "reset":
            proctor.reset_sandbox()
            return proctor.VerifyResponse(output=proctor.read_file("/work/fresh").decode())
        if step == "head":
            data, size = proctor.read_file_head("/work/big", 4)
            whole, wsize = proctor.read_file_head("/work/big")
            return proctor.VerifyResponse(output=f"{data!r} {size} | {whole!r} {wsize} | {proctor.read_file('/work/big')!r}")
        if step == "logs":
            res = proctor.exec("mkdir -p /logs/v && echo hi > /logs/v/f && cat /tests/none 2>/dev/null; ls /logs/v")
            return proctor.VerifyResponse(output=f"{res.stdout.strip()} {proctor.read_file('/logs/v/f').decode().strip()}")
        if step == "huge":
            try:
                proctor.read_file("/work/huge")
            except proctor.FileTooLargeError as e:
                return proctor.VerifyResponse(output=f"{e.size} {e.read}")
            return proctor.VerifyResponse(output="read it whole")
        if step == "info":
            proctor.log(proctor.LEVEL_WARN, "hello")
            return proctor.VerifyResponse(output=proctor.info().backend)
        raise AssertionError(step)


class TestHarness(unittest.TestCase):
    def setUp(self):
        proctor.register(Ops())
        self.host = testing.Host(workdir="/work").install()
        self.addCleanup(self.host.close)

    def verify(self, step):
        return self.host.call("rollout.verify", {"task": {"id": step}}).output

    def test_exec(self):
        res = json.loads(self.verify("exec"))
        self.assertEqual((res["stdout"], res["stderr"], res["exit_code"]), ("in", "err\n", 3))
        with open(self.host.path("/work/out.txt")) as f:
            self.assertEqual(f.read(), "hi\n", "absolute paths map under the root")

    def test_exec_rebases_every_top_folder_once(self):
        # /logs rebased under the root (itself under /tmp) was rebased again
        # as /tmp: commands wrote where read_file did not look.
        self.assertEqual(self.verify("logs"), "f hi")

    def test_files_and_tar(self):
        self.assertEqual(self.verify("files"), "é yes")
        self.assertEqual(self.verify("tar"), "ok")

    def test_capabilities_are_enforced(self):
        with self.assertRaises(testing.HookError) as e:
            self.verify("denied")
        self.assertIn("DeniedError: host model.complete: model.complete was not declared", e.exception.message)
        self.host.grants = [proctor.OP_EXEC]
        with self.assertRaisesRegex(testing.HookError, "sandbox.write_file was not declared"):
            self.verify("files")

    def test_datasets_page(self):
        self.host.datasets["rows"] = [{"i": i} for i in range(2500)]
        self.assertEqual(self.verify("dataset"), "2500")
        self.assertEqual(self.host.calls.count(proctor.OP_DATASET_READ), 3)

    def test_reset(self):
        with self.assertRaisesRegex(testing.HookError, "no reset"):
            self.verify("reset")

        def fresh(h):
            import os

            os.makedirs(h.path("/work"))
            with open(h.path("/work/fresh"), "w") as f:
                f.write("new")

        self.host.reset = fresh
        self.assertEqual(self.verify("reset"), "new")

    def test_info_and_log(self):
        self.assertEqual(self.verify("info"), "emulator")
        self.assertEqual(self.host.logs, [(proctor.LEVEL_WARN, "hello")])

    def test_no_host(self):
        self.host.close()
        with self.assertRaisesRegex(testing.HookError, "no host: natively, run hooks under proctor.testing.Host"):
            testing.call("rollout.verify", {"task": {"id": "info"}})
    def test_read_file_head(self):
        os.makedirs(self.host.path("/work"))
        with open(self.host.path("/work/big"), "wb") as f:
            f.write(b"0123456789")
        self.assertEqual(self.verify("head"), "b'0123' 10 | b'0123456789' 10 | b'0123456789'")
        self.assertEqual(self.host.calls.count(proctor.OP_READ_FILE), 3)
        # The emulator stops at the host's cap, as the host does.
        with open(self.host.path("/work/huge"), "wb") as f:
            f.truncate(proctor.MAX_READ_FILE + 1)
        self.assertEqual(self.verify("huge"), f"{proctor.MAX_READ_FILE + 1} {proctor.MAX_READ_FILE}")

    def test_read_file_refuses_a_truncated_answer(self):
        # The real host stops at MAX_READ_FILE: read_file raises instead of
        # handing back the head as if it were the whole file.
        answers = {"data": base64.b64encode(b"abc").decode(), "size": proctor.MAX_READ_FILE + 1, "truncated": True}
        prev = proctor._set_transport(lambda op, req: (proctor.STATUS_OK, json.dumps(answers).encode()))
        self.addCleanup(proctor._set_transport, *prev)
        with self.assertRaises(proctor.FileTooLargeError) as e:
            proctor.read_file("/huge")
        self.assertEqual((e.exception.path, e.exception.size, e.exception.read), ("/huge", proctor.MAX_READ_FILE + 1, 3))
        self.assertIsInstance(e.exception, OSError)
        # A v1.0 host sends no size: the data is the whole file.
        answers = {"data": base64.b64encode(b"abc").decode()}
        self.assertEqual(proctor.read_file_head("/old"), (b"abc", 3))
        with self.assertRaisesRegex(ValueError, "max_bytes"):
            proctor.read_file_head("/x", -1)


# The Go contract's golden messages (sdk/abi/testdata/wire): every field of
# every message, filled.
WIRE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "abi", "testdata", "wire")


def golden(name):
    with open(os.path.join(WIRE, name + ".json")) as f:
        return json.load(f)


class TestWire(unittest.TestCase):
    """The Python messages against the Go contract, field by field: a field
    the Go side has and Python lacks, or names otherwise, fails here."""

    # Go message → the Python message that reads or writes it.
    MESSAGES = {
        "Manifest": proctor.Manifest,
        "Task": proctor.Task,
        "TasksResponse": proctor.TasksResponse,
        "Skipped": proctor.Skipped,
        "RolloutRequest": proctor.RolloutRequest,
        "VerifyRequest": proctor.VerifyRequest,
        "PromptResponse": proctor.PromptResponse,
        "SandboxSpec": proctor.SandboxSpec,
        "TestResult": proctor.TestResult,
        "VerifyResponse": proctor.VerifyResponse,
        "OracleResponse": proctor.OracleResponse,
        "RewardRequest": proctor.RewardRequest,
        "RewardResponse": proctor.RewardResponse,
        "ExecRequest": proctor._ExecRequest,
        "ExecResponse": proctor.ExecResponse,
        "ReadFileResponse": proctor._ReadFileResponse,
        "DownloadResponse": proctor._DownloadResponse,
        "RepoCheckoutResponse": proctor._RepoCheckoutResponse,
        "DatasetResponse": proctor.DatasetResponse,
        "HostInfo": proctor.HostInfo,
        "ModelResponse": proctor.ModelResponse,
    }

    def test_messages_round_trip_the_go_golden_files(self):
        for name, cls in self.MESSAGES.items():
            with self.subTest(name):
                want = golden(name)
                got = cls.from_json(want, strict=True).to_json()
                self.assertEqual(got, want)

    def test_requests_carry_the_go_names(self):
        sent = {}

        def transport(op, req):
            sent[op] = json.loads(req)
            return proctor.STATUS_OK, b"{}"

        prev = proctor._set_transport(transport)
        self.addCleanup(proctor._set_transport, *prev)
        proctor.exec("c", timeout_ms=1, workdir="/w", env={"A": "1"}, stdin=b"i", max_output=2)
        proctor.read_file_head("/p", 5)
        proctor.write_file("/p", b"d", 0o600)
        proctor.upload("/d", b"t")
        proctor.download("/p")
        proctor.read_dataset("s", "train", offset=1, limit=2, columns=["c"])
        proctor.repo_checkout("u", "c", "/d")
        proctor.complete([{"role": "user", "content": "x"}])
        for op, name in [
            (proctor.OP_EXEC, "ExecRequest"),
            (proctor.OP_READ_FILE, "ReadFileRequest"),
            (proctor.OP_WRITE_FILE, "WriteFileRequest"),
            (proctor.OP_UPLOAD, "UploadRequest"),
            (proctor.OP_DOWNLOAD, "DownloadRequest"),
            (proctor.OP_DATASET_READ, "DatasetRequest"),
            (proctor.OP_REPO_CHECKOUT, "RepoCheckoutRequest"),
            (proctor.OP_MODEL_COMPLETE, "ModelRequest"),
        ]:
            with self.subTest(op):
                self.assertEqual(sorted(sent[op]), sorted(golden(name)))

    def test_names_match_the_go_contract(self):
        names = golden("names")
        self.assertEqual(list(proctor.HOOKS), names["hooks"])
        self.assertEqual(list(proctor.OPS), names["ops"])
        self.assertEqual(list(proctor.CLASSES), names["classes"])
        self.assertEqual((proctor.ABI_VERSION, proctor.ABI_MINOR), (names["version"], names["minor"]))
        self.assertEqual(proctor.MAX_READ_FILE, names["max_read_file"])
        statuses = [proctor.STATUS_OK, proctor.STATUS_ERROR, proctor.STATUS_UNKNOWN, proctor.STATUS_DENIED, proctor.STATUS_DEADLINE, proctor.STATUS_TOO_LARGE, proctor.STATUS_BAD_REQUEST]
        self.assertEqual(statuses, names["status"])
        # What names.json does not hold, from abi.go itself.
        with open(os.path.join(WIRE, "..", "..", "abi.go")) as f:
            src = f.read()
        self.assertIn(f'NetworkInternet = "{proctor.NETWORK_INTERNET}"', src)
        self.assertIn("MaxVerifyLog = 1 << 20", src)
        self.assertEqual(proctor.MAX_VERIFY_LOG, 1 << 20)

    def test_v1_1_fields_default_as_in_go(self):
        # Go leaves each out when empty (omitempty); Python's defaults are
        # the same empty values, so a plugin that does not set them says
        # what a Go plugin says.
        spec = proctor.SandboxSpec(image="i")
        self.assertEqual((spec.private, spec.disk_mb, spec.agent_user, spec.build_timeout_sec), ([], 0, "", 0))
        self.assertEqual(proctor.Task(id="t").broken, "")
        v = proctor.VerifyResponse()
        self.assertEqual((v.log, v.reward_source), ("", ""))
        self.assertNotIn("exit_code", proctor.OracleResponse(output="o").to_json())
        self.assertEqual(proctor.OracleResponse(exit_code=0).to_json(), {"output": "", "exit_code": 0})
        with self.assertRaisesRegex(TypeError, "OracleResponse.exit_code: want an int"):
            proctor.OracleResponse(exit_code="0").to_json()
        with self.assertRaisesRegex(TypeError, "SandboxSpec.private: want a list"):
            proctor.SandboxSpec(private="/logs").to_json()


class V11:
    """An environment that uses every field ABI v1.1 added."""

    def manifest(self):
        return proctor.Manifest(name="v11", version="1", capabilities=[proctor.OP_EXEC])

    def load_tasks(self, config):
        return proctor.TasksResponse(tasks=[proctor.Task(id="ok"), proctor.Task(id="bad", broken="task.toml: line 3: bad value")])

    def sandbox(self, r):
        return proctor.SandboxSpec(image="img", agent_user="agent", disk_mb=512, build_timeout_sec=90.5, private=["/logs/verifier", "/tests"])

    def oracle(self, r):
        res = proctor.exec("exit 4")
        return proctor.OracleResponse(output="ran", exit_code=res.exit_code)

    def verify(self, r):
        return proctor.VerifyResponse(reward=1, passed=True, output="tail", log="the whole log\n", reward_source="/logs/verifier/reward.txt")


class TestV11Hooks(unittest.TestCase):
    def setUp(self):
        proctor.register(V11())

    def test_the_host_reads_the_v1_1_fields(self):
        status, tasks = call_raw("tasks.load", {"config": None})
        self.assertEqual(status, 0)
        self.assertEqual([(t["id"], t["broken"]) for t in tasks["tasks"]], [("ok", ""), ("bad", "task.toml: line 3: bad value")])
        status, spec = call_raw("rollout.sandbox", {"task": {"id": "ok"}})
        self.assertEqual(status, 0)
        self.assertEqual((spec["agent_user"], spec["disk_mb"], spec["build_timeout_sec"], spec["private"]), ("agent", 512, 90.5, ["/logs/verifier", "/tests"]))
        status, v = call_raw("rollout.verify", {"task": {"id": "ok"}})
        self.assertEqual((status, v["log"], v["reward_source"]), (0, "the whole log\n", "/logs/verifier/reward.txt"))
        with testing.Host() as host:
            o = host.call("rollout.oracle", {"task": {"id": "ok"}})
        self.assertEqual((o.output, o.exit_code), ("ran", 4))

    def test_a_returned_dict_is_checked_too(self):
        class Bad(V11):
            def sandbox(self, r):
                return {"image": "i", "privat": ["/x"]}

        proctor.register(Bad())
        status, e = call_raw("rollout.sandbox", {"task": {"id": "ok"}})
        self.assertEqual((status, e["class"]), (proctor.STATUS_ERROR, proctor.CLASS_PLUGIN))
        self.assertIn("SandboxSpec has no field 'privat'", e["error"])


class Private:
    """Keeps a note in a private folder from setup to verify, where the host
    has emptied it."""

    def manifest(self):
        return proctor.Manifest(name="p", version="1", capabilities=[proctor.OP_EXEC, proctor.OP_READ_FILE, proctor.OP_WRITE_FILE])

    def load_tasks(self, config):
        return proctor.TasksResponse(tasks=[proctor.Task(id="t")])

    def sandbox(self, r):
        return proctor.SandboxSpec(private=r.task.data or ["/logs/verifier"])

    def setup(self, r):
        proctor.write_file("/logs/verifier/note", "from setup")

    def verify(self, r):
        try:
            proctor.read_file("/logs/verifier/note")
            seen = "note kept"
        except FileNotFoundError:
            seen = "note gone"
        res = proctor.exec("echo 1 > /logs/verifier/reward.txt && ls /logs/verifier")
        return proctor.VerifyResponse(output=f"{seen}; {res.stdout.split()}")


class TestEmulatedPrivateFolders(unittest.TestCase):
    def setUp(self):
        proctor.register(Private())

    def test_emptied_when_verification_starts(self):
        with testing.Host() as host:
            host.call("rollout.sandbox", {"task": {"id": "t"}})
            self.assertEqual(host.private, ["/logs/verifier"])
            self.assertEqual(os.listdir(host.path("/logs/verifier")), [])
            host.call("rollout.setup", {"task": {"id": "t"}})
            self.assertEqual(host.call("rollout.verify", {"task": {"id": "t"}}).output, "note gone; ['reward.txt']")

    def test_bad_folders_are_refused(self):
        with testing.Host() as host:
            for bad in ["logs", "/", "/.."]:
                with self.assertRaisesRegex(ValueError, "want an absolute folder other than /"):
                    host.call("rollout.sandbox", {"task": {"id": "t", "data": [bad]}})


if __name__ == "__main__":
    unittest.main()


HERE = os.path.dirname(os.path.abspath(__file__))


def expected_refusals():
    """What the probe plugin's attempts give in the WASI runtime, which the
    Go tests check there (sdk/python/testdata/confined/expect.json)."""
    with open(os.path.join(HERE, "..", "testdata", "confined", "expect.json")) as f:
        return json.load(f)


class TestEmulatorRefusesWhatTheRuntimeRefuses(unittest.TestCase):
    """A plugin's native test passes only where the .wasm works: sockets,
    subprocesses, threads, writing files and reading the machine's fail in
    hooks as they fail in the runtime; its own files and the standard
    library read as there."""

    def setUp(self):
        testing.load(os.path.join(HERE, "..", "testdata", "confined"))
        self.host = testing.Host().install()
        self.addCleanup(self.host.close)

    def test_each_attempt_fails_as_in_the_runtime(self):
        for how, want in expected_refusals().items():
            with self.subTest(how):
                try:
                    resp = self.host.call("reward.score", {"task": {"id": how}})
                    got = f"ok {resp.reward:g}"
                except testing.HookError as e:
                    got = e.message
                self.assertEqual(got, want if want.startswith("ok") else f"{how}: {want}")

    def test_nothing_was_written(self):
        self.test_each_attempt_fails_as_in_the_runtime()
        self.assertFalse(os.path.exists(os.path.join(HERE, "..", "testdata", "confined", "made")))

    def test_the_emulators_own_operations_are_not_confined(self):
        # sandbox.exec runs bash, and threads start again once the hook ended.
        testing.load(os.path.join(HERE, "..", "testdata", "confined"))
        import threading

        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()

    def test_import_is_confined_too(self):
        # The runtime imports a plugin once, when it is built, under the
        # same limits as its hooks.
        with open(os.path.join(self.host.root, "plugin.py"), "w") as f:
            f.write("import proctor\nopen('/etc/passwd').read()\n")
        with self.assertRaisesRegex(FileNotFoundError, "/etc/passwd .*a plugin sees only its own files"):
            testing.load(self.host.root)


class Logger:
    def manifest(self):
        return proctor.Manifest(name="logger", version="0")

    def score(self, r):
        proctor.log("info", "by name")
        proctor.log("WARNING", "any case")
        proctor.log(proctor.LEVEL_ERROR, "by number")
        try:
            proctor.log("loud", "no such level")
        except ValueError as e:
            proctor.log("debug", str(e))
        return proctor.RewardResponse(reward=1)


class TestLogLevels(unittest.TestCase):
    def test_names_and_numbers(self):
        proctor.register_reward(Logger())
        with testing.Host() as host:
            host.call("reward.score", {})
        self.assertEqual(
            host.logs,
            [
                (proctor.LEVEL_INFO, "by name"),
                (proctor.LEVEL_WARN, "any case"),
                (proctor.LEVEL_ERROR, "by number"),
                (proctor.LEVEL_DEBUG, "log: unknown level 'loud': want one of debug, info, warn, warning, error or a proctor.LEVEL_* number"),
            ],
        )
