#!/usr/bin/env bash
# Build examples/cpp against the installed tileaot (find_package through
# `python -m tileaot --cmake-prefix-path`) and run it.
#
#   bash examples/cpp/run.sh [BUILD_DIR]     # default: build/example_cpp
#
# Exit status: the example's (0 PASS, 1 FAIL, 77 no usable CUDA device), or the build's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/example_cpp}
python=${PYTHON:-python}
prefix=$("$python" -m tileaot --cmake-prefix-path)
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
# -U: a build folder configured against another install must not keep its tileaot_DIR.
cmake -S "$here" -B "$build" "${generator[@]}" -U tileaot_DIR -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$build" > /dev/null
exec "$build/tileaot_example"
