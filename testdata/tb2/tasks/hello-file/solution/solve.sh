#!/bin/bash
echo 'Hello, world!' > /tmp/hello.txt
