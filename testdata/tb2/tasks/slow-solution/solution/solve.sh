#!/bin/bash
# Too slow: the agent phase times out first.
sleep 60
echo late > /app/late.txt
