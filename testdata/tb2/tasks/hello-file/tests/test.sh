#!/bin/bash
if [ "$(cat /tmp/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo "PASS hello"; echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL hello: got '$(cat /tmp/hello.txt 2>&1)'"; echo 0 > /logs/verifier/reward.txt
fi
