"""example, in Python: a small but complete proctor environment. Each task
asks the agent to write a given text into a file, and verification reads
the file back. The same environment as plugins/example, written with the
Python SDK; docs/plugins.md walks through it.

    [env]
    plugin = "example.wasm"
    grants = ["sandbox.exec", "sandbox.read_file", "sandbox.write_file", "dataset.read"]
    [env.config]
    tasks = [{ id = "one", text = "hello" }]

Build: proctor plugin build plugins/python/example -o example.wasm
"""

import proctor

from items import Item, items_from


class Config:
    image: str = "proctor-base:bookworm"
    dataset: str = ""  # optional JSONL/JSON/parquet rows with id, text
    tasks: list = []


def parse(raw):
    try:
        return proctor.decode_config(raw, Config)
    except proctor.ConfigError as e:
        raise proctor.Error(f"env.config: {e}") from None


class Example:
    def manifest(self):
        return proctor.Manifest(
            name="example",
            version="1.0.0",
            description="write a given text into answer.txt in the working directory",
            capabilities=[proctor.OP_EXEC, proctor.OP_READ_FILE, proctor.OP_WRITE_FILE, proctor.OP_DATASET_READ],
            config_schema={"type": "object", "properties": {"image": {"type": "string"}, "dataset": {"type": "string"}, "tasks": {"type": "array"}}},
        )

    def load_tasks(self, raw):
        c = parse(raw)
        rows = list(c.tasks)
        if c.dataset:
            rows += proctor.read_all_rows(c.dataset)
        resp = proctor.TasksResponse()
        for it, why in items_from(rows):
            if it is None:
                resp.skipped.append(proctor.Skipped(id="?", reason=why))
                continue
            resp.tasks.append(proctor.Task(id=it.id, category=it.category, agent_timeout_sec=60, data=it.to_json()))
        return resp

    def sandbox(self, r):
        image = parse(r.config).image
        if image == "none":
            image = ""  # no image: the local backend's tasks
        return proctor.SandboxSpec(image=image, workdir="/work")

    def setup(self, r):
        # A path relative to the workdir: on the local backend, which is not
        # isolated, an absolute path would be the host's.
        proctor.write_file("README", "Write your answer to answer.txt\n", 0o644)

    def prompt(self, r):
        it = Item.from_json(r.task.data)
        return proctor.PromptResponse(user=f"Write exactly the text {it.text!r} (no newline) into the file answer.txt in the current directory.")

    def oracle(self, r):
        it = Item.from_json(r.task.data)
        res = proctor.exec("printf '%s' \"$ANSWER\" > answer.txt", env={"ANSWER": it.text})
        if res.exit_code != 0:
            raise proctor.Error(f"oracle: exit {res.exit_code}: {res.stderr}")
        return proctor.OracleResponse(output="wrote the answer")

    def verify(self, r):
        it = Item.from_json(r.task.data)
        try:
            got = proctor.read_file("answer.txt").decode("utf-8", "replace")
        except FileNotFoundError:
            return proctor.VerifyResponse(output="no answer.txt", tests=[proctor.TestResult(name="answer", status="failed", message="file missing")])
        except proctor.HostError as e:
            raise proctor.VerifierError(f"read answer: {e}") from None
        if got == it.text:
            return proctor.VerifyResponse(reward=1, passed=True, tests=[proctor.TestResult(name="answer", status="passed")])
        # Partial credit: the right text with stray whitespace.
        if got.strip() == it.text:
            return proctor.VerifyResponse(reward=0.5, output="answer has extra whitespace", tests=[proctor.TestResult(name="answer", status="failed", message="extra whitespace")])
        return proctor.VerifyResponse(output=f"answer {got[:80]!r}", tests=[proctor.TestResult(name="answer", status="failed")])


proctor.register(Example())
