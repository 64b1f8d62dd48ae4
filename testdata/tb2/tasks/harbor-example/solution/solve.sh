#!/bin/bash
# The oracle runs as the agent's user, with [environment].env and
# [solution].env.
echo "$SOME_ENV_VAR" > /app/answer.txt
echo "$API_KEY" > /app/solution-key.txt
id -un > /app/solved-by.txt
echo "solved as $(id -un)"
