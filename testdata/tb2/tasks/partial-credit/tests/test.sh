#!/bin/bash
a=0; b=0
[ "$(cat /app/a.txt 2>/dev/null)" = done ] && a=1
[ "$(cat /app/b.txt 2>/dev/null)" = done ] && b=1
python3 - "$a" "$b" <<'PY'
import json, sys
a, b = int(sys.argv[1]), int(sys.argv[2])
json.dump({"reward": (a + b) / 2, "a": a, "b": b}, open("/logs/verifier/reward.json", "w"))
st = lambda x: "passed" if x else "failed"
json.dump({"results": {"tests": [{"name": "test_a", "status": st(a)}, {"name": "test_b", "status": st(b)}]}}, open("/logs/verifier/ctrf.json", "w"))
PY
echo "a=$a b=$b"
