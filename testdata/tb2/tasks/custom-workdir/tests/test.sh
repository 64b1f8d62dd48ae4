#!/bin/bash
echo "cwd: $(pwd)"
if [ "$(pwd)" = /srv/project ] && [ "$(cat answer.txt 2>/dev/null)" = 2 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
