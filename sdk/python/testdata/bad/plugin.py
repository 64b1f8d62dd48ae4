"""A reward plugin that misbehaves on request, for the runtime's tests: the
task id picks how."""

import proctor


def divide(n):
    return 1 / n


def grow():
    hoard = []
    while True:
        hoard.append(bytearray(1 << 20))


def recurse(n):
    return recurse(n + 1) + 1


class Bad:
    def manifest(self):
        return proctor.Manifest(name="bad", version="0", optional_capabilities=[proctor.OP_MODEL_COMPLETE])

    def score(self, r):
        how = r.task.id
        if how == "raise":
            return proctor.RewardResponse(reward=divide(0))
        if how == "loop":
            while True:
                pass
        if how == "alloc":
            grow()
        if how == "recurse":
            recurse(0)
        if how == "denied":
            proctor.complete([{"role": "user", "content": "hi"}])
        if how == "error":
            raise proctor.Error("no verdict", "verifier")
        if how == "exit":
            raise SystemExit(2)
        if how == "huge":
            return proctor.RewardResponse(reward=1, scores={str(i): i for i in range(1 << 20)})
        return proctor.RewardResponse(reward=1)


proctor.register_reward(Bad())
