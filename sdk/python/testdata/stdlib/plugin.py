"""A reward plugin that exercises the standard library of the runtime and
reports what it saw, for the runtime's tests."""

import base64
import collections
import dataclasses
import datetime
import decimal
import fractions
import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import statistics
import string
import tarfile
import textwrap
import time
import typing
import unicodedata
import zlib

import proctor

IMPORTED_AT = random.random()


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Probe:
    def manifest(self):
        return proctor.Manifest(name="stdlib", version="0", capabilities=[proctor.OP_HOST_INFO, proctor.OP_EXEC])

    def score(self, r):
        what = r.task.id
        if what == "random":
            return proctor.RewardResponse(reward=random.random(), scores={"urandom": int.from_bytes(os.urandom(4), "little"), "imported": IMPORTED_AT})
        if what == "exec":
            res = proctor.exec("big")
            return proctor.RewardResponse(reward=len(res.stdout), scores={"exit": res.exit_code})
        if what == "sleep":
            t0 = time.monotonic()
            time.sleep(0.05)
            return proctor.RewardResponse(reward=time.monotonic() - t0)
        if what == "clock":
            return proctor.RewardResponse(reward=time.process_time())
        if what == "thread":
            import threading

            try:
                threading.Thread(target=print).start()
                started = 1
            except RuntimeError:
                started = 0
            return proctor.RewardResponse(reward=started)
        if what == "asyncio":
            import asyncio

            async def twice(x):
                await asyncio.sleep(0)
                return 2 * x

            try:
                return proctor.RewardResponse(reward=asyncio.run(twice(21)))
            except OSError:  # an event loop needs a socket pair, which WASI lacks
                return proctor.RewardResponse(reward=-1)
        if what == "files":
            try:
                open("/app/new.txt", "w")
                wrote = 1
            except OSError:
                wrote = 0
            return proctor.RewardResponse(reward=wrote, scores={"listed": len(os.listdir("/app"))})
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            data = "héllo".encode()
            info = tarfile.TarInfo("a.txt")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        back = tarfile.open(fileobj=io.BytesIO(buf.getvalue())).extractfile("a.txt").read().decode()
        checks = {
            "json": json.loads(json.dumps({"a": [1, 2.5, None]})) == {"a": [1, 2.5, None]},
            "re": re.findall(r"(?im)^score:\s*(\d+)$", "x\nSCORE: 7\n") == ["7"],
            "sha256": hashlib.sha256(b"abc").hexdigest().startswith("ba7816bf"),
            "blake2": len(hashlib.blake2b(b"x").digest()) == 64,
            "zlib": zlib.decompress(zlib.compress(b"x" * 100)) == b"x" * 100,
            "gzip": gzip.decompress(gzip.compress(b"y")) == b"y",
            "tar": back == "héllo",
            "base64": base64.b64decode(base64.b64encode(b"\x00\xff")) == b"\x00\xff",
            "decimal": str(decimal.Decimal("0.1") + decimal.Decimal("0.2")) == "0.3",
            "fractions": fractions.Fraction(1, 3) * 3 == 1,
            "statistics": statistics.median([3, 1, 2]) == 2,
            "datetime": datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc).isoformat() == "2024-01-02T00:00:00+00:00",
            "dataclass": dataclasses.asdict(Point(1, 2)) == {"x": 1, "y": 2},
            "unicodedata": unicodedata.name("é") == "LATIN SMALL LETTER E WITH ACUTE",
            "collections": collections.Counter("aab").most_common(1) == [("a", 2)],
            "textwrap": textwrap.shorten("a b c d e f", 7) == "a [...]",
            "math": math.isclose(math.sqrt(2) ** 2, 2),
            "typing": typing.get_type_hints(Point)["x"] is int,
            "string": string.ascii_lowercase[:3] == "abc",
            "info": proctor.info().backend == "test",
        }
        failed = [k for k, ok in checks.items() if not ok]
        if failed:
            raise proctor.Error("failed: " + ", ".join(failed))
        return proctor.RewardResponse(reward=1, scores={k: 1 for k in checks})


proctor.register_reward(Probe())
