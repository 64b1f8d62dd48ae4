#!/bin/bash
# The verifier runs as root with [verifier].env; what the agent wrote
# belongs to the agent's user.
ok=1
check() { if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1: got '$2', want '$3'"; ok=0; fi; }
check answer "$(cat /app/answer.txt 2>&1)" from-task-toml
check verifier-user "$(id -un)" root
check verifier-env "$API_KEY" sk-test-123
check environment-env "$SOME_ENV_VAR" from-task-toml
check agent-user "$(stat -c %U /app/answer.txt 2>&1)" agent
echo $ok > /logs/verifier/reward.txt
