#!/usr/bin/env bash
# CI: report a wheel's platform policy and check that it bundles and needs no CUDA library.
#
#   bash scripts/audit_wheel.sh [WHEEL]        # default: the wheel in dist/
#
# `auditwheel show` prints the manylinux tag the wheel's symbol versions allow (a wheel built
# here gets this machine's glibc; release wheels are built in manylinux_2_28 images, see
# [tool.cibuildwheel] in pyproject.toml). `build_tools audit-wheel` fails if any shared object
# in the wheel names a CUDA/torch library in DT_NEEDED, bundles one, or has a RUNPATH outside
# the wheel: at run time tileaot needs only the driver, which it dlopen()s.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=${1:-$(ls dist/tileaot-*.whl 2>/dev/null | head -1)}
if [ -z "$wheel" ]; then
  echo "no wheel given and none in dist/: build one with: bash scripts/build_wheel.sh" >&2
  exit 2
fi
python -m pip install -q 'auditwheel>=6' # brings pyelftools, which audit-wheel reads ELF with
python -m auditwheel show "$wheel"
python -m build_tools audit-wheel "$wheel"
