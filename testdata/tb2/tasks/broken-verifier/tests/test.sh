#!/bin/bash
echo "setting up the checker"
echo "fatal: checker crashed before scoring" >&2
exit 3
