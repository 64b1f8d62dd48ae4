#!/bin/bash
got=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8123/status.txt", timeout=5).read().decode().strip())' 2>&1)
echo "server said: $got"
if [ "$got" = ok ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
