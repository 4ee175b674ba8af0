#!/usr/bin/env bash
# Install the wheel from dist/ and run the test suite (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=$(ls dist/tileaot-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  echo "no wheel in dist/: build it first with: bash scripts/build_wheel.sh" >&2
  exit 2
fi
python -m pip install -q --force-reinstall --no-deps "$wheel"
python -m pip install -q pytest numpy ruff==0.17.6
python -m ruff check .
# The runtime against a fake driver (selection, caching, launch attributes, error texts).
cmake -S cpp/tests_native -B build/tests_native -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/tests_native > /dev/null
ctest --test-dir build/tests_native --output-on-failure
python -m pytest -q -p no:cacheprovider "$@"
