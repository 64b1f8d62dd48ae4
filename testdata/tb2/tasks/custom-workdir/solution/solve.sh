#!/bin/bash
python3 calc.py > answer.txt
