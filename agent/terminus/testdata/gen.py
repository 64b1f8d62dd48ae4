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


def scenarios(src):
    return {"commit": COMMIT, "scenarios": []}


if __name__ == "__main__":
    main()
