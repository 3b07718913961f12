#!/usr/bin/env bash
# bytecode.sh PYTHON DIR: the layer in DIR as Lambda's CPython (PYTHON, 3.13) loads it fastest.
# Libraries: bytecode only, in the legacy layout (module.pyc where module.py was), sources removed where
# their bytecode was made. The engram package: sources kept, bytecode in __pycache__ (unchecked-hash).
set -euo pipefail
python=$1
cd "$2"
"$python" -m compileall -q -b -j 0 -x '^\./engram/' . >/dev/null || true  # a file it cannot compile keeps its source
find . -name "*.py" -not -path "./engram/*" | while IFS= read -r source; do
	if [ -f "${source}c" ]; then rm "$source"; fi
done
if [ -d engram ]; then "$python" -m compileall -q -j 0 --invalidation-mode unchecked-hash engram; fi
