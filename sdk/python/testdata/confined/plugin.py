"""A reward plugin that tries, on request, what the WASI runtime refuses a
plugin: the task id names the attempt. An attempt that fails raises
proctor.Error naming the exception and its errno; one that works scores 1.
The runtime's tests (host/plugin/wasm) and the emulator's (sdk/python/tests)
run it alike: a native test passes only where the .wasm works."""

import errno
import os
import socket
import subprocess
import tempfile
import threading

import proctor

HERE = os.path.dirname(os.path.abspath(__file__))


def attempt(how):
    if how == "socket":
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    elif how == "subprocess":
        subprocess.run(["true"], check=False)
    elif how == "system":
        os.system("true")
    elif how == "thread":
        threading.Thread(target=lambda: None).start()
    elif how == "write_tmp":
        with open(f"/tmp/proctor-confined-probe-{os.getpid()}", "w") as f:
            f.write("x")
    elif how == "tempfile":
        tempfile.mkstemp()
    elif how == "mkdir":
        os.mkdir(os.path.join(HERE, "made"))
    elif how == "passwd":
        with open("/etc/passwd") as f:
            f.read()
    elif how == "listdir":
        os.listdir("/etc")
    elif how == "own_file":
        with open(os.path.join(HERE, "data.txt")) as f:
            if f.read().strip() != "carried":
                raise AssertionError("data.txt")
    elif how == "stdlib":
        import json

        json.dumps({})
    else:
        raise AssertionError(how)


def errno_name(e):
    """The errno's name, the same on Linux and WASI (whose numbers differ)."""
    n = getattr(e, "errno", None)
    if n is None:
        return "-"
    if n == errno.ENOTSUP:
        return "ENOTSUP"  # EOPNOTSUPP on Linux
    return errno.errorcode.get(n, str(n))


class Probe:
    def manifest(self):
        return proctor.Manifest(name="confined", version="0")

    def score(self, r):
        try:
            attempt(r.task.id)
        except (OSError, RuntimeError, AttributeError) as e:
            raise proctor.Error(f"{r.task.id}: {type(e).__name__} {errno_name(e)}")
        return proctor.RewardResponse(reward=1)


proctor.register_reward(Probe())
