#!/usr/bin/env python3
"""Write the golden file of proctor's mini-swe-agent (agent/miniswe) from
mini-swe-agent's own code.

    python3 gen.py MSWEA_SRC

MSWEA_SRC is a checkout of SWE-agent/mini-swe-agent at
a83fcae82d2a08f0ee0c688f9d137b3566c097f8 (v2.4.6, 22 July 2026), e.g.

    git clone https://github.com/SWE-agent/mini-swe-agent /tmp/mswea
    git -C /tmp/mswea checkout a83fcae82d2a08f0ee0c688f9d137b3566c097f8

Nothing of mini-swe-agent is copied here. This script loads its modules
from the checkout and runs them with its default SWE-bench configuration
(src/minisweagent/config/benchmarks/swebench.yaml): DefaultAgent,
LitellmModel, DockerEnvironment, parse_toolcall_actions and
format_toolcall_observation_messages run for real; what they would reach
outside stands in for them: the model's endpoint (LitellmModel._query
returns scripted responses; litellm's cost function returns each one's
scripted cost), the container (subprocess.run in the docker environment
runs a Python one-liner that prints the scripted bytes and exits with the
scripted code, so decoding and newline translation are CPython's own, or
raises TimeoutExpired as a timeout does), and the few packages Debian's
python3 lacks (pydantic's BaseModel, litellm, the package's banner).

It writes golden.json: the rendered system and instance messages,
observations and format errors for many inputs, and whole runs (every
request's messages and tools, every command's working directory,
environment and timeout, the exit status and submission).

Made with Debian bookworm's python3 (3.11.2) and its python3-jinja2 (3.1.2),
python3-yaml and python3-tenacity. mini-swe-agent is MIT licensed.
"""

import base64
import copy
import json
import os
import subprocess
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMIT = "a83fcae82d2a08f0ee0c688f9d137b3566c097f8"
CONTAINER = "4f1c" + "0" * 52 + "c0ffee42"


def stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


class BaseModel:
    """pydantic.BaseModel's stand-in: annotated fields, defaults copied."""

    def __init__(self, **kw):
        for name in self._fields():
            if name in kw:
                v = kw[name]
            else:
                v = copy.deepcopy(getattr(type(self), name))
            object.__setattr__(self, name, v)

    @classmethod
    def _fields(cls):
        names = []
        for klass in reversed(cls.__mro__):
            for n in getattr(klass, "__annotations__", {}):
                if n not in names:
                    names.append(n)
        return names

    def model_dump(self, mode=None):
        return {n: getattr(self, n) for n in self._fields()}


class ContextWindowExceededError(Exception):
    pass


def install(src):
    root = src / "src/minisweagent"
    stub("pydantic", BaseModel=BaseModel)
    errs = {n: type(n, (Exception,), {}) for n in ["UnsupportedParamsError", "NotFoundError", "PermissionDeniedError", "AuthenticationError"]}
    stub("litellm", exceptions=types.SimpleNamespace(ContextWindowExceededError=ContextWindowExceededError, **errs),
         cost_calculator=types.SimpleNamespace(completion_cost=lambda response, model=None: response.cost),
         utils=types.SimpleNamespace(register_model=lambda *a: None))
    pkg = stub("minisweagent", __version__="2.4.6", Agent=object, Environment=object, Model=object)
    pkg.__path__ = [str(root)]
    import yaml
    import minisweagent.agents.default as default
    import minisweagent.environments.docker as docker
    import minisweagent.models.litellm_model as lm
    import minisweagent.models.utils.actions_toolcall as tc
    config = yaml.safe_load((root / "config/benchmarks/swebench.yaml").read_text())
    return default, docker, lm, tc, config


# ---------------------------------------------------------------- pieces

OUTPUTS = [
    {"output": "hello\n", "returncode": 0, "exception_info": ""},
    {"output": "", "returncode": 1, "exception_info": ""},
    {"output": "no newline", "returncode": 2, "exception_info": ""},
    {"output": "partial", "returncode": -1, "exception_info": "An error occurred while executing the command: boom"},
    {"output": "é" * 9999, "returncode": 0, "exception_info": ""},
    {"output": "é" * 10000, "returncode": 0, "exception_info": ""},
    {"output": "".join(chr(0x4e00 + i % 500) for i in range(23456)) + "\nend\n", "returncode": 0, "exception_info": ""},
    {"output": "x" * 15000, "returncode": 137, "exception_info": "An error occurred while executing the command: Command 'x' timed out after 60 seconds"},
    {"output": "  \n\n", "returncode": 0, "exception_info": ""},
]

CALLS = [
    [],
    [{"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}],
    [{"id": "c1", "name": "bash", "arguments": '{"command": "ls"'}],
    [{"id": "c1", "name": "bash", "arguments": ""}],
    [{"id": "c1", "name": "python", "arguments": '{"command": "ls"}'}],
    [{"id": "c1", "name": "python", "arguments": '{"code": 1}'}],
    [{"id": "c1", "name": "bash", "arguments": '{"cmd": "ls"}'}],
    [{"id": "c1", "name": "bash", "arguments": '["ls"]'}],
    [{"id": "c1", "name": "bash", "arguments": '{"command": 5}'}],
    [{"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}, {"id": "c2", "name": "bash", "arguments": "{oops}"}],
    [{"id": "c1", "name": "edit", "arguments": "nope"}],
    [{"id": "c1", "name": "bash", "arguments": '{"command": "a"} trailing'}],
    [{"id": "c1", "name": "bash", "arguments": '{"command": "é", "extra": [1, 2]}'}],
]


class Obj(types.SimpleNamespace):
    pass


def tool_calls(calls):
    return [Obj(id=c["id"], type="function", function=Obj(name=c["name"], arguments=c["arguments"])) for c in calls]


def pieces(tc, config):
    from jinja2 import StrictUndefined, Template

    agent = config["agent"]
    model = config["model"]
    out = {"system": Template(agent["system_template"], undefined=StrictUndefined).render(task="unused"),
           "instance": [], "observations": [], "format_errors": []}
    for task in ["Fix the bug.", "Multi\nline {{ task }} {% raw %}\n", "", "ends with newline\n"]:
        out["instance"].append({"task": task, "text": Template(agent["instance_template"], undefined=StrictUndefined).render(task=task)})
    for o in OUTPUTS:
        msg = tc.format_toolcall_observation_messages(actions=[{"command": "x", "tool_call_id": "c1"}], outputs=[o],
                                                      observation_template=model["observation_template"], template_vars={})
        out["observations"].append({"output": o, "text": msg[0]["content"], "role": msg[0]["role"]})
    for calls in CALLS:
        for finish in ["stop", "length", "tool_calls", None]:
            try:
                acts = tc.parse_toolcall_actions(tool_calls(calls), format_error_template=model["format_error_template"],
                                                 template_kwargs={"finish_reason": finish})
                out["format_errors"].append({"calls": calls, "finish": finish, "actions": acts})
            except Exception as e:
                out["format_errors"].append({"calls": calls, "finish": finish, "error": e.messages[0]["content"]})
    return out


# ---------------------------------------------------------------- runs

EVENTS = []


def response(step):
    calls = step.get("tool_calls", [])
    msg = Obj(content=step.get("content"), tool_calls=tool_calls(calls) or None, role="assistant")
    msg.model_dump = lambda: {"content": msg.content, "role": "assistant",
                              "tool_calls": [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls] or None,
                              "function_call": None}
    resp = Obj(choices=[Obj(message=msg, finish_reason=step.get("finish", "tool_calls" if calls else "stop"))], cost=step.get("cost", 0.5))
    resp.model_dump = lambda mode=None: {"id": "scripted"}
    return resp


WRITER = "import base64, sys; sys.stdout.buffer.write(base64.b64decode(sys.argv[1])); sys.stdout.flush(); sys.exit(int(sys.argv[2]))"


def fake_subprocess(results):
    real = subprocess

    def run(cmd, **kw):
        command = cmd[-1]
        i = cmd.index("-w")
        env = [cmd[k + 1] for k in range(len(cmd)) if cmd[k] == "-e"]
        if not isinstance(command, str) or "\0" in command:
            return real.run([sys.executable, "-c", "pass", command], **kw)  # raises as docker's would
        res = results.pop(0)
        EVENTS.append({"exec": command, "cwd": cmd[i + 1], "env": env, "timeout": kw.get("timeout"), "result": res})
        raw = base64.b64decode(res.get("raw", ""))
        if res.get("timeout"):
            raise real.TimeoutExpired(cmd, kw["timeout"], output=raw)
        return real.run([sys.executable, "-c", WRITER, res.get("raw", ""), str(res.get("rc", 0))], **kw)

    return types.SimpleNamespace(run=run, PIPE=real.PIPE, STDOUT=real.STDOUT, TimeoutExpired=real.TimeoutExpired, Popen=real.Popen)


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


def bash(*commands, content="Let me look.", ids=None, **kw):
    return {"content": content, "tool_calls": [{"id": (ids or [f"call_{i}" for i in range(len(commands))])[i], "name": "bash",
                                                 "arguments": json.dumps({"command": c})} for i, c in enumerate(commands)], **kw}


PATCH = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"

RUNS = [
    dict(name="submit", steps=[bash("ls"), bash("sed -i 's/1/2/' m.py", "git diff -- m.py > patch.txt"), bash("cat patch.txt"), bash(SUBMIT)],
         results=[{"raw": b64("m.py\ntests\n")}, {"raw": ""}, {"raw": ""}, {"raw": b64(PATCH)},
                  {"raw": b64("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + PATCH)}]),
    dict(name="submit-among-parallel-calls", steps=[bash("ls", SUBMIT, "rm -rf /")],
         results=[{"raw": b64("m.py\n")}, {"raw": b64("\n  COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT  \n" + PATCH)}]),
    dict(name="format-errors", steps=[
        {"content": "I am thinking."},
        {"content": None, "tool_calls": [{"id": "a", "name": "python", "arguments": '{"code": "1"}'}]},
        bash("ls"),
        {"content": "x", "tool_calls": [{"id": "b", "name": "bash", "arguments": '{"command": "ls"'}]},
        {"content": "cut", "finish": "length"},
        {"content": "", "tool_calls": [{"id": "c", "name": "bash", "arguments": '{"cmd": "ls"}'}]}],
        results=[{"raw": b64("m.py\n")}]),
    dict(name="timeout-and-step-limit", config={"agent": {"step_limit": 3}}, steps=[
        bash("sleep 100"), bash("printf 'a\\r\\nb\\rc'; printf '\\xff\\xfe bad'", "yes | head -c 30000"), bash("ls")],
        results=[{"timeout": True, "raw": b64("started\r\n")}, {"raw": b64(b"a\r\nb\rc\xff\xfe bad")}, {"raw": b64("y\n" * 15000)}, {"raw": b64("m.py\n")}]),
    dict(name="cost-limit", steps=[bash("ls", cost=1.25), bash("ls", cost=1.25), bash("ls", cost=1.25)],
         results=[{"raw": b64("a\n")}, {"raw": b64("a\n")}, {"raw": b64("a\n")}]),
    dict(name="odd-commands", steps=[
        {"content": "n", "tool_calls": [{"id": "n", "name": "bash", "arguments": '{"command": 42}'}]},
        {"content": "z", "tool_calls": [{"id": "z", "name": "bash", "arguments": '{"command": "echo a\\u0000b"}'}]},
        bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 3"), bash("echo done")],
        results=[{"raw": b64("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n"), "rc": 3}, {"raw": b64("done\n")}],
        config={"agent": {"step_limit": 4}}),
    dict(name="context-window", steps=[bash("ls"), {"raise": "context"}], results=[{"raw": b64("a\n")}]),
    dict(name="format-errors-reset", steps=[
        {"content": "a"}, {"content": "b"}, bash("ls"), {"content": "c"}, {"content": "d"}, {"content": "e"}],
        results=[{"raw": b64("a\n")}]),
]


def run(default, docker, lm, config, spec):
    EVENTS.clear()
    cfg = copy.deepcopy(config)
    for k, v in spec.get("config", {}).items():
        cfg[k].update(v)
    steps = [dict(s) for s in spec["steps"]]
    model_cfg = {k: v for k, v in cfg["model"].items() if k != "model_name"}
    model = lm.LitellmModel(model_name="scripted", **model_cfg)

    def query(self, messages, **kw):
        step = steps.pop(0)
        EVENTS.append({"llm": copy.deepcopy(messages), "tools": [lm.BASH_TOOL], "reply": step})
        if step.get("raise") == "context":
            raise ContextWindowExceededError("context window exceeded")
        return response(step)

    lm.LitellmModel._query = query
    env_cfg = {k: v for k, v in cfg["environment"].items() if k != "environment_class"}
    env = docker.DockerEnvironment.__new__(docker.DockerEnvironment)
    env.logger = __import__("logging").getLogger("env")
    env.config = docker.DockerEnvironmentConfig(image="scripted", **env_cfg)
    env.container_id = CONTAINER
    docker.subprocess = fake_subprocess([dict(r) for r in spec["results"]])
    agent = default.DefaultAgent(model, env, **cfg["agent"])
    try:
        info = agent.run("Make m.py set x to 2.")
        end = {"exit_status": info.get("exit_status"), "submission": info.get("submission")}
    except Exception as e:
        end = {"exception": f"{type(e).__name__}: {e}"}
    if steps:
        raise SystemExit(f"run {spec['name']}: {len(steps)} scripted replies left over")
    env.container_id = None  # no docker stop at exit
    return {"name": spec["name"], "config": spec.get("config", {}), "events": list(EVENTS), "end": end,
            "messages": [m for m in agent.messages if m["role"] != "exit"], "calls": agent.n_calls, "cost": agent.cost}


def main():
    src = Path(sys.argv[1])
    default, docker, lm, tc, config = install(src)
    golden = {"commit": COMMIT, "container": CONTAINER, "environment": config["environment"],
              "agent": {k: v for k, v in config["agent"].items() if not k.endswith("_template")},
              "pieces": pieces(tc, config), "runs": [run(default, docker, lm, config, r) for r in RUNS]}
    with open(HERE / "golden.json", "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1, default=repr)
        f.write("\n")


if __name__ == "__main__":
    main()
