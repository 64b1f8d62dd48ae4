#!/usr/bin/env bash
# The docker-CLI baseline of `make bench-e2e`: the rollouts of a proctor run
# done the way a harness that shells out to the docker CLI does them, as
# hermes-agent's docker backend (tools/environments/docker.py: `docker run
# -d ... sleep`, one `docker exec` per command, `bash -lc`) and Harbor's
# exec path (`docker cp` of the tests in, `docker exec` of test.sh, `docker
# cp` of the verifier's folder out) do. It is the reference for the peers'
# mechanism, not a harness to use: no timeouts, no isolation of the
# verifier, no resume.
#
# usage: docker-cli.sh IMAGE ROLLOUTS CONCURRENCY CALLS TESTS LABEL
#   CALLS  a file of tool calls, one a line: "write_file PATH CONTENT" (the
#          content in printf's %b escapes) or "terminal COMMAND"
#   TESTS  the task's tests folder (test.sh writes /logs/verifier/reward.txt)
#   LABEL  a label value for every container, so a killed run can be cleaned
#          (docker rm -f $(docker ps -aq --filter label=proctor.bench=LABEL))
# It prints "passed N of M" and exits 1 when a rollout failed to run.
set -euo pipefail

if [ $# -ne 6 ]; then
  sed -n '/^# usage/,/^# It prints/p' "$0" >&2
  exit 2
fi
export IMAGE=$1 CALLS=$4 TESTS=$5 LABEL=$6
rollouts=$2 concurrency=$3

# rollout runs one rollout and prints "pass" or "fail".
rollout() {
  local n=$1 cid out rc=0 kind rest path content
  out=$(mktemp -d)
  cid=$(docker run -d --label "proctor.bench=$LABEL" --network none --init \
    --cap-drop ALL --cap-add CHOWN --cap-add DAC_OVERRIDE --cap-add FOWNER --cap-add SETUID \
    --cap-add SETGID --cap-add KILL --security-opt no-new-privileges \
    --cpus 1 --memory 512m --pids-limit 1024 "$IMAGE" sleep infinity)
  # setup: the environment's folders
  docker exec "$cid" mkdir -p /logs/agent /logs/verifier
  # the agent: each file operation and command is its own `docker exec`
  while IFS= read -r line; do
    kind=${line%% *} rest=${line#* }
    case $kind in
      write_file)
        path=${rest%% *} content=${rest#* }
        docker exec "$cid" bash -lc "mkdir -p $(dirname "$path")" >/dev/null
        printf '%b' "$content" | docker exec -i "$cid" bash -lc "cat > $path" >/dev/null
        docker exec "$cid" bash -lc "wc -c < $path" >/dev/null ;;
      terminal)
        docker exec "$cid" bash -lc "$rest" >/dev/null 2>&1 || true ;;
    esac
  done < "$CALLS"
  # verification: tests in, test.sh, the verifier's folder out
  docker exec "$cid" mkdir -p /tests
  docker cp "$TESTS/." "$cid:/tests" >/dev/null
  docker exec "$cid" bash -c '(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1' || rc=$?
  docker cp "$cid:/logs/verifier" "$out" >/dev/null
  docker rm -f "$cid" >/dev/null
  if [ "$(cat "$out/verifier/reward.txt" 2>/dev/null)" = 1 ]; then echo pass; else echo "fail $n (test.sh exit $rc)"; fi
  rm -rf "$out"
}
export -f rollout

results=$(seq "$rollouts" | xargs -P "$concurrency" -I{} bash -c 'rollout {}')
passed=$(grep -c '^pass$' <<<"$results" || true)
echo "passed $passed of $rollouts"
grep -v '^pass$' <<<"$results" >&2 || true
[ "$(grep -c . <<<"$results")" -eq "$rollouts" ]
