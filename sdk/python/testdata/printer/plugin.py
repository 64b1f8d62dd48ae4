"""A reward plugin that prints, for the runtime's tests: its stdout and
stderr go to the instance's log, where proctor.log's lines go."""

import sys

import proctor


class Printer:
    def manifest(self):
        return proctor.Manifest(name="printer", version="0")

    def score(self, r):
        print("to stdout", r.task.id)
        print("to stderr", file=sys.stderr)
        proctor.log("info", "by proctor.log")
        sys.stdout.write("unfinished")
        return proctor.RewardResponse(reward=1)


proctor.register_reward(Printer())
