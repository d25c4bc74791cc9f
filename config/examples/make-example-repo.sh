#!/bin/sh
# Makes the git repository workflow-repo.json works on (default
# /tmp/tasksup-example-repo): one commit holding greeting.txt.
# Usage: make-example-repo.sh [DIR]
set -eu
dir=${1:-/tmp/tasksup-example-repo}
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
git init -q -b main
git config user.name "tasksup example"
git config user.email "example@tasksup.invalid"
echo "hello" >greeting.txt
git add greeting.txt
git commit -q -m "greeting"
echo "$dir"
