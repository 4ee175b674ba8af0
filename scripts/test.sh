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
python -m pip install -q pytest numpy hypothesis ruff==0.17.6  # hypothesis: tests/test_fuzz.py
# TileKernels' pure-torch references, the spec of the parity tests (pure Python: no deps).
python -m pip install -q --no-deps tile-kernels==1.0.0
python -m ruff check .
# The runtime against a fake driver (selection, caching, launch attributes, error texts).
cmake -S cpp/tests_native -B build/tests_native -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/tests_native > /dev/null
ctest --test-dir build/tests_native --output-on-failure
# The C++ example against the installed wheel (find_package through `python -m tileaot
# --cmake-prefix-path`): its checks run on a GPU; without one it exits 77 (skipped).
example=0
bash examples/cpp/run.sh || example=$?
[ "$example" -eq 0 ] || [ "$example" -eq 77 ] || { echo "examples/cpp failed ($example)" >&2; exit 1; }
# The wheel's platform policy, and no CUDA library bundled or needed (installs auditwheel and
# pyelftools, which tests/test_wheel_audit.py also reads ELF files with).
bash scripts/audit_wheel.sh "$wheel"
python -m pytest -q -p no:cacheprovider "$@"
# The source distribution builds in a fresh virtualenv without tilelang and torch (~1 min).
bash scripts/sdist_check.sh
