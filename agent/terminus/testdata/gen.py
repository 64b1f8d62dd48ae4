#!/usr/bin/env python3
"""Write the golden files of proctor's Terminus-2 (agent/terminus) from
Harbor's own code.

    python3 gen.py HARBOR_SRC

HARBOR_SRC is a checkout of harbor-framework/harbor at
1b1dbc43729edff705071a797bb0f98a90cf62f5 (v0.9.0, 28 May 2026), e.g.

    git clone https://github.com/harbor-framework/harbor /tmp/harbor
    git -C /tmp/harbor checkout 1b1dbc43729edff705071a797bb0f98a90cf62f5

Nothing of Harbor is copied here: this script imports Harbor's parser
modules from the checkout, and runs Terminus2's own methods (loaded from
terminus_2.py and tmux_session.py in the checkout) with stand-ins for what
they would reach outside (the model, the container, litellm, pydantic
models), then records what they produced:

- parse.json: TerminusJSONPlainParser and TerminusXMLPlainParser on
  hand-written and generated replies (result, or the exception raised), and
  the XML parser's salvage_truncated_response;
- scenarios.json: whole agent loops (Terminus2._run_agent_loop, run(),
  TmuxSession, the summarization subagents) against a scripted model and a
  scripted terminal: every model call's messages, every command sent to the
  container, every wait.

Made with Debian bookworm's python3 (3.11.2) and no package beyond the
standard library. Harbor is Apache-2.0 licensed.
"""

import ast
import asyncio
import importlib.util
import json
import os
import random
import subprocess
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMIT = "1b1dbc43729edff705071a797bb0f98a90cf62f5"


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- parsers

JSON_CASES = [
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}, {"keystrokes": "cd x\\n", "duration": 1}]}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": true}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n"}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": "fast"}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": true}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 123456789012345678901234567890}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": -3}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": NaN}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1e999}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1, "wait": 2}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls", "duration": 1}, {"keystrokes": "pwd", "duration": 1}]}',
    'Here is my answer:\n{"analysis": "a", "plan": "p", "commands": []}\nHope it helps',
    '```json\n{"analysis": "a", "plan": "p", "commands": []}\n```',
    '{"analysis": "a", "plan": "p", "commands": [],}',
    '{"analysis": "' + "x" * 250 + '", "plan": "p", "commands": [],}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}]',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}',
    '{"analysis": "a", "plan": "p", "commands": [',
    'I think {"note": "x"} and then {"analysis": "a", "plan": "p", "commands": []} done {',
    'prefix {bad} then {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x\\n", "duration": 1}]} and {"analysis": ',
    '{"analysis": "a", "plan": "p"}',
    '{"commands": []}',
    '{}',
    '{"analysis": "a", "plan": "p", "commands": "ls"}',
    '{"analysis": 5, "plan": ["x"], "commands": []}',
    '{"commands": [], "plan": "p", "analysis": "a"}',
    '{"plan": "p", "analysis": "a", "commands": []}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": "yes"}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": "TRUE"}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": "no"}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": 1}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": []}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": null}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": {"a": 1}}',
    '{"analysis": "a", "plan": "p", "commands": ["ls"]}',
    '{"analysis": "a", "plan": "p", "commands": ["ls"], "task_complete": true}',
    '{"analysis": "a", "plan": "p", "commands": [{"duration": 1}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": 5}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": 5}], "task_complete": true}',
    'no json here',
    '',
    '   ',
    '}{',
    '{"analysis": "é ü 日本 🙂", "plan": "p", "commands": [{"keystrokes": "echo \'🙂\'\\n", "duration": 0.5}]}',
    '\u3000{"analysis": "a", "plan": "p", "commands": []}\u00a0',
    'a \\{ b {"analysis": "a\\"}{", "plan": "p", "commands": []}',
    '{"analysis"\u3000: "a", "plan": "p", "commands": []}',
    '{"analysis": "a", "analysis": "b", "plan": "p", "commands": []}',
    '{"analysis": "{nested}", "plan": "}", "commands": [{"keystrokes": "{}\\n", "duration": 1}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x", "duration": 1, "ERROR:": 1}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "C-c", "duration": 0}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "", "duration": 10.0}]}',
    '{"analysis": "a\\ud83d", "plan": "p", "commands": []}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": true',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}], "task_complete": "true"} extra',
    '{' * 30 + '}' * 10,
    '{"a": {"b": {"c": 1}}} {"analysis": "a", "plan": "p", "commands": []}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1.5e-7}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 00}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n" "duration": 1}]}',
    "{'analysis': 'a', 'plan': 'p', 'commands': []}",
    '{"analysis": "line\nbreak", "plan": "p", "commands": []}',
]

XML_CASES = [
    '<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands>\n<keystrokes duration="0.1">ls -la\n</keystrokes>\n<keystrokes duration="1">cd x\n</keystrokes>\n</commands>\n</response>',
    '<response><analysis>a</analysis><plan>p</plan><commands></commands><task_complete>true</task_complete></response>',
    'Sure!\n<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands></response>\nthanks',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands></response>\n<response><analysis>b</analysis></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands>',
    'no tags at all',
    '<response></response>',
    '<response>   </response>',
    '<response><analysis>a</analysis><plan>p</plan></response>',
    '<response><analysis>a</analysis><plan>p</plan><task_complete>true</task_complete></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands/></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands />\n<task_complete>TRUE</task_complete></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes>ls\n</keystrokes></commands><notes>x</notes></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands><commands><keystrokes duration="1">pwd\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><analysis>b</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands></response>',
    '<response><commands><keystrokes duration="1">ls\n</keystrokes></commands><plan>p</plan><analysis>a</analysis></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration=1>ls\n</keystrokes></commands></response>',
    "<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration='2'>ls\n</keystrokes></commands></response>",
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1" wait="2">ls\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="soon">ls\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration=" 1_0 ">ls\n</keystrokes><keystrokes duration="٣">pwd</keystrokes><keystrokes duration="inf">x</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">echo &lt;b&gt; &amp;&amp; echo &quot;x&quot; &apos;\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">printf "a\\r\\n"\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls</keystrokes></commands><task_complete> true </task_complete></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands><task_complete>false</task_complete></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands><task_complete/></response>',
    '<response><!-- note --><?pi x?><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">echo "<b>hi</b>"\n</keystrokes><keystrokes duration="0.1">C-c</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">a</keystrokes><keystrokes duration="1">b</keystrokes></commands></response>',
    '<response><analysis>a < b</analysis><plan>p</plan><commands><keystrokes duration="1">x\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">x\n</keystrokes></commands><  ></response>',
    '<response><analysis>é 日本 🙂</analysis><plan>p</plan><commands><keystrokes duration="0.5">echo 🙂\n</keystrokes></commands></response>',
    '<response>\n<analysis>\n  spaced  \n</analysis>\n<plan/>\n<commands>\n<keystrokes duration = "2">ls\n</keystrokes>\n</commands>\n</response>',
    '<response><analysis>a</analysis><plan>p</plan><commands>just text, no keystrokes</commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands></response></response>',
    '</response> early <response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">x\n</keystrokes></commands></response>',
    '<response><Analysis>a</Analysis><plan>p</plan><commands><keystrokes duration="1">x\n</keystrokes></commands></response>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1" >x\n</keystrokes></commands><TASK_COMPLETE>True</TASK_COMPLETE></response>',
]

SALVAGE_CASES = [
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands></response> and then I kept talking until the lim',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands>',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keyst',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands><commands></commands></response> more',
    '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes></commands></response>\n<response><analysis>b</analysis><plan>p</plan><commands></commands></response>',
    '<response><plan>p</plan><commands></commands></response>',
    '</commands></response>',
]


def fragments(rnd, fmt):
    """A reply put together from pieces, for breadth."""
    if fmt == "json":
        parts = ['{', '}', '"analysis": "a", ', '"plan": "p", ', '"commands": [', ']', '{"keystrokes": "ls\\n", "duration": 1}',
                 ', ', '"task_complete": true', '"task_complete": "false"', 'text ', '\\', '"', '\n', '"duration": "x"',
                 '{"keystrokes": 3}', 'é', '[', ':', ',']
    else:
        parts = ['<response>', '</response>', '<analysis>a</analysis>', '<plan>p</plan>', '<commands>', '</commands>',
                 '<keystrokes duration="1">ls\n</keystrokes>', '<keystrokes>x</keystrokes>', "<keystrokes duration='x'>y</keystrokes>",
                 '<task_complete>true</task_complete>', '<task_complete/>', '<commands/>', 'text ', '<', '>', '/>', '\n',
                 '&amp;', '<!-- c -->', 'é']
    return "".join(rnd.choice(parts) for _ in range(rnd.randint(0, 14)))


def parse_result(parser, reply):
    try:
        r = parser.parse_response(reply)
    except Exception as e:  # a Python exception is part of the behaviour
        return {"exception": f"{type(e).__name__}: {e}"}
    return {
        "commands": [{"keystrokes": c.keystrokes, "duration": repr(float(c.duration))} for c in r.commands],
        "complete": bool(r.is_task_complete),
        "error": r.error,
        "warning": r.warning,
    }


def parse_golden(src):
    tdir = src / "src/harbor/agents/terminus_2"
    jp = load_module("tjson", tdir / "terminus_json_plain_parser.py").TerminusJSONPlainParser()
    xp = load_module("txml", tdir / "terminus_xml_plain_parser.py").TerminusXMLPlainParser()
    rnd = random.Random(35)
    cases = [("json", c) for c in JSON_CASES] + [("xml", c) for c in XML_CASES]
    cases += [(f, fragments(rnd, f)) for f in ("json", "xml") for _ in range(400)]
    out = []
    for fmt, reply in cases:
        out.append({"format": fmt, "reply": reply, **parse_result(jp if fmt == "json" else xp, reply)})
    salvage = []
    for reply in SALVAGE_CASES:
        got, multiple = xp.salvage_truncated_response(reply)
        salvage.append({"reply": reply, "salvaged": got, "multiple": multiple})
    return {"commit": COMMIT, "cases": out, "salvage": salvage}


def order_dependent(src, golden):
    """Mark the cases whose warnings come out of a Python set, whose order
    changes with the string hash seed: their lines are compared as a set."""
    seeds = []
    for seed in ("1", "2", "3", "4", "5"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run([sys.executable, __file__, str(src), "--parse-only"], env=env, capture_output=True, check=True)
        seeds.append(json.loads(res.stdout)["cases"])
    for i, c in enumerate(golden["cases"]):
        c["unordered"] = any(s[i].get("warning") != c.get("warning") for s in seeds)


def main():
    src = Path(sys.argv[1])
    if "--parse-only" in sys.argv:
        json.dump(parse_golden(src), sys.stdout)
        return
    golden = parse_golden(src)
    order_dependent(src, golden)
    write("parse.json", golden)
    write("scenarios.json", scenarios(src))


def write(name, data):
    with open(HERE / name, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


# ---------------------------------------------------------------- scenarios
#
# Terminus2 runs for real; around it stand in: the model (FakeLLM: scripted
# replies, raises as LiteLLM raises), the container (FakeEnv: answers the
# tmux commands from FakeTerm, a small terminal that echoes keys and prints
# scripted outputs), the clock (tmux_session's time.time is constant and its
# asyncio.sleep records instead of sleeping), the token counter (the code
# points of the messages' contents) and the harbor modules that need
# pydantic or litellm (trajectory models, LiteLLM, BaseAgent).

EVENTS = []


def stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


class Rec:
    """A pydantic model's stand-in: keyword fields, None for the rest."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None

    def to_json_dict(self):
        return {}


def install_harbor(src):
    import logging
    from dataclasses import dataclass
    from enum import Enum
    from pathlib import PurePosixPath

    root = src / "src/harbor"
    for name, path in [("harbor", root), ("harbor.agents", root / "agents"), ("harbor.llms", root / "llms"),
                       ("harbor.agents.terminus_2", root / "agents/terminus_2"), ("harbor.models", root / "models"),
                       ("harbor.models.agent", root / "models/agent"), ("harbor.models.trial", root / "models/trial"),
                       ("harbor.environments", root / "environments"), ("harbor.utils", root / "utils")]:
        stub(name).__path__ = [str(path)]

    class BaseAgent:
        def __init__(self, logs_dir, model_name=None, *args, **kwargs):
            self.logs_dir = Path(logs_dir)
            self.logger = logging.getLogger("terminus-scenario")
            self.mcp_servers = []
            self.skills_dir = None

    @dataclass
    class UsageInfo:
        prompt_tokens: int
        completion_tokens: int
        cache_tokens: int
        cost_usd: float

    class AgentName(Enum):
        TERMINUS_2 = "terminus-2"

    stub("harbor.agents.base", BaseAgent=BaseAgent)
    stub("harbor.environments.base", BaseEnvironment=object)
    stub("harbor.models.metric", UsageInfo=UsageInfo)
    stub("harbor.models.agent.rollout_detail", RolloutDetail=dict)
    stub("harbor.models.agent.context", AgentContext=Rec)
    stub("harbor.models.agent.name", AgentName=AgentName)
    stub("harbor.models.agent.trajectory_config", TrajectoryConfig=dict)
    stub("harbor.models.trajectories", **{n: Rec for n in ["Agent", "FinalMetrics", "Metrics", "Observation",
                                                           "ObservationResult", "Step", "SubagentTrajectoryRef",
                                                           "ToolCall", "Trajectory"]})
    stub("harbor.models.trial.paths", EnvironmentPaths=Rec(agent_dir=PurePosixPath("/logs/agent")))
    stub("harbor.utils.trajectory_utils", format_trajectory_json=lambda d: "{}")
    stub("harbor.utils.logger", logger=logging.getLogger("harbor"))
    stub("harbor.llms.lite_llm", LiteLLM=object)
    import harbor.agents.terminus_2.tmux_session as ts
    import harbor.agents.terminus_2.terminus_2 as t2
    import harbor.llms.base as base

    async def sleep(secs):
        EVENTS.append({"sleep": repr(float(secs))})

    ts.asyncio = types.SimpleNamespace(sleep=sleep)
    ts.time = types.SimpleNamespace(time=lambda: 1000.0)
    return t2, base


PROMPT = "root@box:/app# "


class FakeTerm:
    def __init__(self, outputs, height):
        self.lines = [PROMPT]
        self.outputs = outputs
        self.height = height

    def keys(self, keys):
        for k in keys:
            if k in ("Enter", "C-m"):
                self.enter()
            elif k == "C-c":
                self.lines[-1] += "^C"
                self.lines.append(PROMPT)
            else:
                for ch in k:
                    if ch == "\n":
                        self.enter()
                    else:
                        self.lines[-1] += ch

    def enter(self):
        cmd = self.lines[-1][len(PROMPT):].strip() if self.lines[-1].startswith(PROMPT) else ""
        if cmd == "clear":
            self.lines = [PROMPT]
            return
        out = self.outputs.get(cmd)
        if out is None and cmd:
            out = f"bash: {cmd.split()[0]}: command not found"
        if out:
            self.lines.extend(out.split("\n"))
        self.lines.append(PROMPT)

    def capture(self, entire):
        lines = [line.rstrip() for line in self.lines]
        n = self.height
        screen = lines[-n:] + [""] * (n - len(lines[-n:]))
        if entire:
            return "\n".join(lines[:-n] + screen) + "\n"
        return "\n".join(screen) + "\n"


def harbor_command(cmd):
    """The commands of Harbor's that proctor reproduces: the session and
    its tmux commands (not the installation probes)."""
    return (cmd.startswith("tmux ") or cmd.startswith("export TERM")) and cmd != "tmux -V"


class FakeEnv:
    session_id = "scenario"
    default_user = None

    def __init__(self, term, dies_after):
        self.term = term
        self.checks = 0
        self.dies_after = dies_after
        self.trial_paths = types.SimpleNamespace(agent_dir=Path("/tmp"))

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None):
        out, rc = "", 0
        if command.startswith("tmux send-keys"):
            import shlex
            words = shlex.split(command)
            self.term.keys(words[words.index("--") + 1:])
        elif command.startswith("tmux capture-pane"):
            out = self.term.capture("-S" in command.split())
        elif command.startswith("tmux has-session"):
            self.checks += 1
            rc = 1 if self.dies_after and self.checks > self.dies_after else 0
        if harbor_command(command):
            EVENTS.append({"exec": command, "out": out, "rc": rc})
        return types.SimpleNamespace(stdout=out, stderr=None, return_code=rc)

    async def upload_file(self, source_path, target_path):
        pass

    async def is_dir(self, path):
        return False


def fake_llm(base, steps, context_limit, output_limit):
    import copy

    class FakeLLM(base.BaseLLM):
        async def call(self, prompt, message_history=[], **kwargs):
            msgs = copy.deepcopy(list(message_history)) + [{"role": "user", "content": prompt}]
            step = steps.pop(0)
            EVENTS.append({"llm": msgs, "reply": step})
            if step.get("raise") == "context":
                raise base.ContextLengthExceededError()
            if step.get("raise") == "error":
                raise RuntimeError("the endpoint failed")
            if step.get("finish") == "length":
                raise base.OutputLengthExceededError("cut", truncated_response=step["content"])
            usage = sys.modules["harbor.models.metric"].UsageInfo(10, 5, 0, 0.0)
            return base.LLMResponse(content=step["content"], reasoning_content=step.get("reasoning"),
                                    usage=usage, model_name="scripted")

        def get_model_context_limit(self):
            return context_limit

        def get_model_output_limit(self):
            return output_limit

    return FakeLLM()


def J(analysis="a", plan="p", cmds=(), complete=None, **extra):
    d = {"analysis": analysis, "plan": plan, "commands": [{"keystrokes": k, "duration": t} for k, t in cmds]}
    if complete is not None:
        d["task_complete"] = complete
    d.update(extra)
    return {"content": json.dumps(d)}


def X(cmds=(), complete=None, extra=""):
    ks = "".join(f'<keystrokes duration="{t}">{k}</keystrokes>' for k, t in cmds)
    tc = "" if complete is None else f"<task_complete>{complete}</task_complete>"
    return {"content": f"<response><analysis>a</analysis><plan>p</plan><commands>{ks}</commands>{tc}</response>{extra}"}


LONG = "\n".join(f"line {i} " + "x" * 70 for i in range(400))
HELLO = {"echo hello > /tmp/hello.txt": "", "cat /tmp/hello.txt": "hello", "ls": "a.txt  b.txt", "long": LONG,
         "python3 slow.py": "working...", "make": "cc -o app main.c\nmain.c:1: warning: unused"}

SCENARIOS = [
    dict(name="json-hello", parser="json", steps=[
        J(cmds=[("echo hello > /tmp/hello.txt\n", 0.1), ("cat /tmp/hello.txt\n", 0.1)]),
        J(complete=True), J(complete=True)]),
    dict(name="json-errors-and-warnings", parser="json", steps=[
        {"content": "I will list the files."},
        J(cmds=[("ls\n", None)]) | {"content": '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n"}]}'},
        {"content": 'Sure: {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls", "duration": 1}, {"keystrokes": "ls\\n", "duration": 1}]}'},
        {"content": '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x", "duration": 1, "ERROR:": 1}]}'},
        {"content": '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}'},
        J(complete="yes"), J(complete=True)]),
    dict(name="json-confirmation-reset", parser="json", steps=[
        J(cmds=[("ls\n", 0.5)], complete=True), J(cmds=[("make\n", 5)]), J(cmds=[("C-c", 0)], complete=True),
        J(cmds=[("", 120)], complete=True)]),
    dict(name="xml-hello", parser="xml", steps=[
        X(cmds=[("echo hello > /tmp/hello.txt\n", 0.1)]),
        {"content": "<response><analysis>a</analysis><commands><keystrokes>ls\n</keystrokes></commands></response> trailing"},
        {"content": "no xml"},
        X(cmds=[("cat /tmp/hello.txt &amp;&amp; ls\n", "0.2")]),
        X(complete="true"), X(complete="TRUE")]),
    dict(name="json-long-output", parser="json", steps=[
        J(cmds=[("long\n", 1)]), J(cmds=[("echo '" + "é" * 9000 + "'\n", 1)]), J(cmds=[("ls\n", 1)]),
        J(cmds=[("long\n", 1)], complete=True), J(complete=True)]),
    dict(name="json-max-turns", parser="json", kwargs={"max_turns": 2}, steps=[
        J(cmds=[("ls\n", 0.1)]), J(cmds=[("ls\n", 0.1)])]),
    dict(name="json-session-ends", parser="json", dies_after=2, steps=[J(cmds=[("ls\n", 0.1)]), J(cmds=[("ls\n", 0.1)])]),
    dict(name="json-context-summarized", parser="json", context_limit=16000, kwargs={"proactive_summarization_threshold": 0}, steps=[
        J(cmds=[("long\n", 1)]), J(cmds=[("ls\n", 1)]), {"raise": "context"},
        {"content": "I listed files and printed a long file."}, {"content": "1. Which files? 2. Why?"},
        {"content": "Answers: a.txt and b.txt."}, J(cmds=[("cat /tmp/hello.txt\n", 0.1)]),
        J(complete=True), J(complete=True)]),
    dict(name="json-context-short-summary", parser="json", steps=[
        J(cmds=[("ls\n", 1)]), {"raise": "context"}, {"raise": "error"}, {"content": "Next: cat the file."},
        J(complete=True), J(complete=True)]),
    dict(name="json-context-fallbacks", parser="json", steps=[
        J(cmds=[("ls\n", 1)]), {"raise": "context"}, {"raise": "context"}, {"raise": "context"}, {"raise": "context"},
        J(complete=True), J(complete=True)]),
    dict(name="json-context-no-summarize", parser="json", kwargs={"enable_summarize": False}, steps=[
        J(cmds=[("ls\n", 1)]), {"raise": "context"}]),
    dict(name="json-proactive", parser="json", context_limit=20000, steps=[
        J(cmds=[("long\n", 1)]), J(cmds=[("long\n", 1)]),
        {"content": "Summary."}, {"content": "Questions?"}, {"content": "Answers."},
        J(complete=True), J(complete=True)]),
    dict(name="json-output-limit", parser="json", steps=[
        {"content": '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "dur', "finish": "length"},
        J(cmds=[("ls\n", 0.1)]), J(complete=True), J(complete=True)]),
    dict(name="xml-output-limit", parser="xml", output_limit=4096, steps=[
        {"content": "<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration=1>ls\n</keystrokes><keystro", "finish": "length"},
        X(cmds=[("ls\n", 0.1)], complete="true"), X(complete="true")]),
    dict(name="xml-salvage", parser="xml", steps=[
        {"content": "<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration=\"1\">ls\n</keystrokes></commands></response> and more", "finish": "length"}]),
    dict(name="json-interleaved-thinking", parser="json", kwargs={"interleaved_thinking": True}, steps=[
        J(cmds=[("ls\n", 0.1)]) | {"reasoning": "First look around."}, J(complete=True) | {"reasoning": "Done."},
        J(complete=True)]),
    dict(name="json-no-recording-small-pane", parser="json", kwargs={"record_terminal_session": False, "tmux_pane_width": 80, "tmux_pane_height": 12}, steps=[
        J(cmds=[("long\n", 1)]), J(complete=True), J(complete=True)]),
    dict(name="json-warnings-long-output", parser="json", instruction="Write {x} and {{y}} to /tmp/out.", steps=[
        {"content": '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "long\\n"}]}'},
        {"content": 'ok {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "long\\n", "duration": 1}], "task_complete": true}'},
        J(complete=True)]),
    dict(name="json-huge-keystrokes", parser="json", steps=[
        J(cmds=[("cat > f <<'EOF'\n" + "abc'def " * 4000 + "\nEOF\n", 1), ("ls\n", 0.1)]), J(complete=True), J(complete=True)]),
]


def run_scenario(t2, base, sc, tmp):
    import asyncio as aio

    EVENTS.clear()
    steps = [dict(s) for s in sc["steps"]]
    llm = fake_llm(base, steps, sc.get("context_limit", 1000000), sc.get("output_limit"))
    kwargs = dict(sc.get("kwargs", {}))
    t2.Terminus2._init_llm = lambda self, **kw: llm
    t2.Terminus2._count_total_tokens = lambda self, chat: sum(len(m["content"]) for m in chat.messages)
    agent = t2.Terminus2(logs_dir=tmp, model_name="scripted", parser_name=sc["parser"], **kwargs)
    term = FakeTerm(HELLO, kwargs.get("tmux_pane_height", 40))
    env = FakeEnv(term, sc.get("dies_after"))

    async def go():
        await agent.setup(env)
        await agent.run(sc.get("instruction", "Create /tmp/hello.txt containing hello."), env, Rec())

    try:
        aio.run(go())
        end = "ok"
    except Exception as e:
        end = f"{type(e).__name__}: {e}"
    if steps:
        raise SystemExit(f"scenario {sc['name']}: {len(steps)} scripted replies left over")
    return {"name": sc["name"], "parser": sc["parser"], "kwargs": kwargs, "context_limit": sc.get("context_limit", 1000000),
            "output_limit": sc.get("output_limit"), "instruction": sc.get("instruction", "Create /tmp/hello.txt containing hello."),
            "events": list(EVENTS), "end": end, "episodes": agent._n_episodes}


def scenarios(src):
    import tempfile

    t2, base = install_harbor(src)
    with tempfile.TemporaryDirectory() as tmp:
        return {"commit": COMMIT, "scenarios": [run_scenario(t2, base, sc, tmp) for sc in SCENARIOS]}


if __name__ == "__main__":
    main()
