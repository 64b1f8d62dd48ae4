"""toolstats, in Python: a reward plugin that needs no capability and
scores how cleanly the agent used its tools. Its reward is the share of
tool calls that did not fail (1 when there were none); its named scores are
the counts behind it. The same plugin as plugins/toolstats, written with
the Python SDK.

Stack it on any environment::

    [[reward]]
    plugin = "toolstats.wasm"
    weight = 0.1

Build: proctor plugin build plugins/python/toolstats/toolstats.py
"""

import proctor


class Toolstats:
    def manifest(self):
        return proctor.Manifest(name="toolstats", version="1.0.0", description="share of tool calls that did not fail")

    def check_config(self, config):
        """toolstats has no [reward.config] keys: any key is a mistake."""
        if config:
            raise proctor.ConfigError(f"unknown key {sorted(config)[0]!r}: toolstats takes no config")

    def score(self, r):
        # A transcript of another shape (an oracle's, say) has no turns and
        # scores 1.
        tr = r.trajectory if isinstance(r.trajectory, dict) else {}
        traj = tr.get("trajectory") if isinstance(tr.get("trajectory"), dict) else {}
        turns = traj.get("turns") if isinstance(traj.get("turns"), list) else []
        calls = failed = malformed = 0
        for turn in turns:
            if not isinstance(turn, dict):
                continue
            tools, errors = turn.get("tools"), turn.get("errors")
            for tool in tools if isinstance(tools, list) else []:
                calls += 1
                if isinstance(tool, dict) and tool.get("failed") is True:
                    failed += 1
            malformed += len(errors) if isinstance(errors, list) else 0
        reward = 1.0
        if calls + malformed > 0:
            reward = (calls - failed) / (calls + malformed)
        return proctor.RewardResponse(
            reward=reward,
            scores={"turns": len(turns), "tool_calls": calls, "failed_calls": failed, "malformed_calls": malformed},
        )


proctor.register_reward(Toolstats())
