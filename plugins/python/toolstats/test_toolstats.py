"""Native tests of the toolstats plugin (run with PYTHONPATH=sdk/python
python3 -m unittest); the Go tests run the same plugin built to wasm."""

import os
import unittest

import proctor
from proctor import testing

HERE = os.path.dirname(os.path.abspath(__file__))


class TestToolstats(unittest.TestCase):
    def setUp(self):
        testing.load(os.path.join(HERE, "toolstats.py"))

    def test_score(self):
        tr = {"trajectory": {"turns": [{"tools": [{"name": "terminal"}, {"name": "patch", "failed": True}]}, {"errors": ["unknown tool"]}, {}]}}
        resp = testing.call(proctor.HOOK_REWARD, {"trajectory": tr})
        self.assertAlmostEqual(resp.reward, 1 / 3)
        self.assertEqual(resp.scores, {"turns": 3, "tool_calls": 2, "failed_calls": 1, "malformed_calls": 1})

    def test_no_tool_calls(self):
        for tr in ({"trajectory": {"agent": "oracle"}}, None, {"trajectory": {"turns": "x"}}, {"trajectory": {"turns": [{"tools": 3, "errors": "e"}]}}):
            with self.subTest(tr=tr):
                self.assertEqual(testing.call(proctor.HOOK_REWARD, {"trajectory": tr}).reward, 1)

    def test_reward_only(self):
        m = testing.describe()
        self.assertEqual(m.hooks, [proctor.HOOK_DESCRIBE, proctor.HOOK_REWARD, proctor.HOOK_CONFIG])
        self.assertEqual(m.capabilities, [])
        self.assertEqual(m.abi, proctor.ABI_VERSION)
        with self.assertRaises(testing.HookError) as e:
            testing.call(proctor.HOOK_TASKS, {})
        self.assertIn("[[reward]]", e.exception.message)

    def test_config_check(self):
        testing.call(proctor.HOOK_CONFIG, {"config": {}})
        with self.assertRaises(testing.HookError) as e:
            testing.call(proctor.HOOK_CONFIG, {"config": {"weight": 1}})
        self.assertIn("unknown key 'weight': toolstats takes no config", e.exception.message)


if __name__ == "__main__":
    unittest.main()
