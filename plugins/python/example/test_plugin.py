"""Native tests of the example environment (PYTHONPATH=sdk/python python3
-m unittest); the Go tests run the same plugin built to wasm, under the
real host and in a real run."""

import os
import unittest

import proctor
from proctor import testing

HERE = os.path.dirname(os.path.abspath(__file__))


class TestExample(unittest.TestCase):
    def setUp(self):
        testing.load(os.path.join(HERE, "plugin.py"))
        self.host = testing.Host(workdir="/work").install()
        self.addCleanup(self.host.close)

    def test_rollout(self):
        h = self.host
        h.datasets["rows.jsonl"] = [{"id": "d1", "text": "from a dataset"}, {"text": "no id"}]
        cfg = {"dataset": "rows.jsonl", "tasks": [{"id": "c1", "text": "hello"}]}
        tasks = h.call(proctor.HOOK_TASKS, {"config": cfg})
        self.assertEqual([t.id for t in tasks.tasks], ["c1", "d1"])
        self.assertEqual([s.reason for s in tasks.skipped], ["task without an id"])
        rr = {"task": tasks.tasks[0].to_json(), "config": cfg}
        spec = h.call(proctor.HOOK_SANDBOX, rr)
        self.assertEqual((spec.image, spec.workdir), ("proctor-base:bookworm", "/work"))
        h.call(proctor.HOOK_SETUP, rr)
        with open(h.path("README")) as f:
            self.assertIn("answer.txt", f.read())
        self.assertIn("'hello'", h.call(proctor.HOOK_PROMPT, rr).user)

        v = h.call(proctor.HOOK_VERIFY, rr)
        self.assertFalse(v.passed)
        self.assertEqual(v.tests[0].message, "file missing")
        with open(h.path("answer.txt"), "w") as f:
            f.write("hello\n")
        self.assertEqual(h.call(proctor.HOOK_VERIFY, rr).reward, 0.5)
        h.call(proctor.HOOK_ORACLE, rr)
        v = h.call(proctor.HOOK_VERIFY, rr)
        self.assertTrue(v.passed)
        self.assertEqual(v.reward, 1)
        self.assertEqual(h.calls.count(proctor.OP_DATASET_READ), 1)

    def test_bad_config(self):
        with self.assertRaises(testing.HookError) as e:
            self.host.call(proctor.HOOK_TASKS, {"config": {"task": []}})
        self.assertIn("env.config: unknown key 'task'", e.exception.message)
        self.assertEqual(e.exception.error_class, "")

    def test_manifest(self):
        m = testing.describe()
        self.assertEqual(m.name, "example")
        self.assertEqual(m.hooks, [proctor.HOOK_DESCRIBE, proctor.HOOK_TASKS, proctor.HOOK_PROMPT, proctor.HOOK_SANDBOX, proctor.HOOK_SETUP, proctor.HOOK_VERIFY, proctor.HOOK_ORACLE])


if __name__ == "__main__":
    unittest.main()
