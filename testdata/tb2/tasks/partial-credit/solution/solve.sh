#!/bin/bash
# The reference solution does only half, so the oracle earns 0.5.
echo done > /app/a.txt
