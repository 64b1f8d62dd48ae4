#!/bin/bash
sed -i "s/a - b/a + b/" /app/mathlib.py
