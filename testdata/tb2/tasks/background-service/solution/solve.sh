#!/bin/bash
mkdir -p /srv/www && echo ok > /srv/www/status.txt
cd /srv/www && nohup python3 -m http.server 8123 --bind 127.0.0.1 > /tmp/server.log 2>&1 &
for i in $(seq 50); do
  python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8123/", timeout=1)' 2>/dev/null && exit 0
  sleep 0.1
done
echo "server did not come up" >&2; exit 1
