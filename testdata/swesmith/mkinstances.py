#!/usr/bin/env python3
"""Make the SWE-smith fixture instances by breaking functions procedurally.

Runs inside a fixture image, on the clean repository at /testbed, and
prints the instances as JSONL on stdout:

    docker run --rm --network none -v "$PWD/testdata/swesmith:/fx:ro" \
        proctor-swesmith-fixture:2 python3 /fx/mkinstances.py > testdata/swesmith/instances.jsonl
    docker run --rm --network none -v "$PWD/testdata/swesmith:/fx:ro" \
        proctor-swesmith-textkit:1 python3 /fx/mkinstances.py textkit pytest > testdata/swesmith/textkit-pytest.jsonl
    docker run --rm --network none -v "$PWD/testdata/swesmith:/fx:ro" \
        proctor-swesmith-textkit:1 python3 /fx/mkinstances.py textkit unittest > testdata/swesmith/textkit-unittest.jsonl

The first argument names the fixture (calc, the default, or textkit), the
second how tests are named: pytest node ids ("tests/test_x.py::Class::test_y",
from pytest's JUnit report) or the ids unittest prints ("test_y
(tests.test_x.Class.test_y)", from unittest's own results), as SWE-smith
records them for a repository whose tests run with unittest.

As SWE-smith's procedural bug generation does, it rewrites one function at a
time with an AST transformation (change an operator, swap operands, invert a
comparison, remove a conditional, shift a constant, remove a loop, drop a
method call), runs the
tests, and keeps a change as an instance when it breaks at least one test:
FAIL_TO_PASS are the tests that passed before and fail after, PASS_TO_PASS
the ones that pass both times. The patch is `git diff` of the change. One
instance per function is kept, its transformation chosen by a seeded
shuffle. The
last calc instance is made stale on purpose: its patch was made for code
that has since changed, so it no longer applies.

cmd/proctor's TestSwesmithFixturesCurrent runs this again and checks that
the committed files are exactly its output.
"""
import ast
import copy
import json
import os
import random
import subprocess
import sys
import xml.etree.ElementTree as ET

REPO = "/testbed"
SEED = 7
FIXTURES = {
    "calc": {"repo": "proctor/calc", "image": "proctor-swesmith-fixture:2",
             "modules": ["calc/ops.py", "calc/text.py"], "stale": True},
    "textkit": {"repo": "proctor/textkit", "image": "proctor-swesmith-textkit:1",
                "modules": ["textkit/words.py", "textkit/numbers.py"], "stale": False},
}


def sh(*args):
    return subprocess.run(args, cwd=REPO, check=True, capture_output=True, text=True).stdout


def run_pytest():
    """Run every test with pytest; return node id -> passed? (None: skipped)"""
    report = "/tmp/mkinstances-junit.xml"
    subprocess.run(
        ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
         "--junitxml=" + report, "tests"],
        cwd=REPO, capture_output=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    out = {}
    for case in ET.parse(report).iter("testcase"):
        module = case.get("file")[:-3].replace("/", ".")
        classes = case.get("classname")[len(module) + 1:].split(".") if case.get("classname") != module else []
        node = "::".join([case.get("file")] + classes + [case.get("name")])
        out[node] = None if case.find("skipped") is not None else len(case) == 0
    return out


# Runs in a fresh interpreter, so it imports the code as it is on disk now.
UNITTEST = """
import json, unittest
out = {}
class Result(unittest.TestResult):
    def addSuccess(self, test):
        out[str(test)] = True
    def addFailure(self, test, err):
        out[str(test)] = False
    addError = addFailure
    def addSkip(self, test, why):
        out[str(test)] = None
    addExpectedFailure = addSkip
    def addUnexpectedSuccess(self, test):
        out[str(test)] = False
unittest.defaultTestLoader.discover(".").run(Result())
print(json.dumps(out))
"""


def run_unittest():
    """Run every test with unittest; return the id it prints -> passed? (None: skipped)"""
    res = subprocess.run(["python3", "-c", UNITTEST], cwd=REPO, check=True, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return json.loads(res.stdout)


# The transformations: each rewrites the first place in a function it
# applies to, or returns None.

FLIP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult, ast.Pow: ast.Mult, ast.Mod: ast.Mult}
INVERT = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def first(fn, kind):
    for node in ast.walk(fn):
        if isinstance(node, kind):
            return node
    return None


def change_operator(fn):
    node = first(fn, ast.BinOp)
    if node is None or type(node.op) not in FLIP:
        return None
    node.op = FLIP[type(node.op)]()
    return fn


def swap_operands(fn):
    node = first(fn, ast.BinOp)
    if node is None:
        return None
    node.left, node.right = node.right, node.left
    return fn


def invert_comparison(fn):
    node = first(fn, ast.Compare)
    if node is None or type(node.ops[0]) not in INVERT:
        return None
    node.ops[0] = INVERT[type(node.ops[0])]()
    return fn


def remove_first(fn, kinds):
    """Delete the first statement of one of kinds, wherever it stands."""
    for parent in ast.walk(fn):
        body = getattr(parent, "body", None)
        if isinstance(body, list):
            for i, stmt in enumerate(body):
                if isinstance(stmt, kinds):
                    del body[i]
                    return fn
    return None


def remove_conditional(fn):
    return remove_first(fn, ast.If)


def shift_constant(fn):
    for node in ast.walk(fn):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
            return fn
    return None


def remove_loop(fn):
    return remove_first(fn, (ast.For, ast.While))


def remove_method_call(fn):
    """x.m(...) becomes x, for the innermost such call."""
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    if not calls:
        return None
    target = calls[-1]
    for parent in ast.walk(fn):
        for field, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, field, target.func.value)
                return fn
            if isinstance(value, list) and target in value:
                value[value.index(target)] = target.func.value
                return fn
    return None


MUTATORS = [change_operator, swap_operands, invert_comparison, remove_conditional, shift_constant, remove_loop,
            remove_method_call]


def candidates(fixture, run_tests, clean):
    """Every (module, function, mutator) that breaks a test, with its instance fields."""
    for module in fixture["modules"]:
        path = os.path.join(REPO, module)
        source = open(path).read()
        tree = ast.parse(source)
        lines = source.splitlines(keepends=True)
        for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
            for mutate in MUTATORS:
                changed = mutate(copy.deepcopy(fn))
                if changed is None:
                    continue
                new = ast.unparse(changed) + "\n"
                old = "".join(lines[fn.lineno - 1:fn.end_lineno])
                if new == old or ast.dump(changed) == ast.dump(fn):
                    continue
                with open(path, "w") as f:
                    f.write("".join(lines[:fn.lineno - 1]) + new + "".join(lines[fn.end_lineno:]))
                try:
                    after = run_tests()
                    patch = sh("git", "diff")
                finally:
                    sh("git", "checkout", "--", module)
                f2p = sorted(t for t, ok in clean.items() if ok and not after.get(t, False))
                p2p = sorted(t for t, ok in clean.items() if ok and after.get(t, False))
                if f2p:
                    yield module, fn.name, mutate.__name__, patch, f2p, p2p


def test_name(t):
    return t.split("::")[-1] if "::" in t else t.split(" ")[0]


def statement(module, func, f2p):
    name = module[:-3].replace("/", ".")
    tests = ", ".join(test_name(t) for t in f2p)
    return f"{name}.{func}() gives wrong results: {tests} fail{'s' if len(f2p) == 1 else ''} since it changed."


def instance_id(name, module, func, mutator, base):
    if name == "calc":
        return f"calc__{module[:-3].split('/')[-1]}.{func}__{mutator}"
    # SWE-smith's form: the mirror's name, owner__repo.commit, then the bug.
    return f"proctor__{name}.{base[:8]}.{func}__{mutator}"


def row(name, fixture, module, func, mutator, patch, f2p, p2p, base):
    return {
        "instance_id": instance_id(name, module, func, mutator, base),
        "repo": fixture["repo"],
        "patch": patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "image_name": fixture["image"],
        "base_commit": base,
        "problem_statement": statement(module, func, f2p),
    }


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "calc"
    ids = sys.argv[2] if len(sys.argv) > 2 else "pytest"
    if name not in FIXTURES or ids not in ("pytest", "unittest"):
        sys.exit("usage: mkinstances.py [calc|textkit] [pytest|unittest]")
    fixture = FIXTURES[name]
    run_tests = run_pytest if ids == "pytest" else run_unittest
    if sh("git", "status", "--porcelain", "--untracked-files=no").strip():
        sys.exit("mkinstances: /testbed is not clean")
    base = sh("git", "rev-parse", "HEAD").strip()
    clean = run_tests()
    if False in clean.values():
        sys.exit("mkinstances: the clean repository fails its own tests")
    found = list(candidates(fixture, run_tests, clean))
    # One instance per function, its transformation picked by a seeded
    # shuffle, in a stable order.
    random.Random(SEED).shuffle(found)
    picked, funcs = [], set()
    for c in found:
        if c[1] not in funcs:
            funcs.add(c[1])
            picked.append(c)
    picked.sort(key=lambda c: (c[0], c[1]))
    rows = [row(name, fixture, *c, base) for c in picked]
    if not fixture["stale"]:
        for r in rows:
            print(json.dumps(r))
        return
    # The stale instance: the first patch, made for a version of the code
    # whose first context line has since changed.
    stale = dict(rows[0])
    lines = stale["patch"].splitlines(keepends=True)
    hunk = next(i for i, l in enumerate(lines) if l.startswith("@@"))
    ctx = next(i for i in range(hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[ctx] = lines[ctx].rstrip("\n") + "  # since changed\n"
    stale["patch"] = "".join(lines)
    stale["instance_id"] = "calc__ops.stale_patch"
    stale["problem_statement"] = "A bug whose patch no longer applies to the repository."
    rows.append(stale)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
