#!/usr/bin/env bash
# Build the tileaot wheel into dist/ with the default matrix (every op, sm_70 ... sm_100a).
#
# Extra arguments go to `pip wheel`, e.g. a reduced matrix:
#   bash scripts/build_wheel.sh -Ccmake.define.TILEAOT_ARCHS=90a -Ccmake.define.TILEAOT_OPS='rms_norm*'
# The build runs without isolation because tracing needs tilelang + the CPU torch installed
# here (an isolated build env would resolve torch to a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements-build.txt
rm -rf dist/tileaot-*.whl
python -m pip wheel . --no-build-isolation --no-deps -w dist "$@"
ls -la dist/
