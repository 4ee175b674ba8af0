#!/usr/bin/env bash
# Build the tileaot wheel into dist/ with the default matrix (every op, sm_70 ... sm_100a).
#
# Extra arguments go to `pip wheel`, e.g. a reduced matrix:
#   bash scripts/build_wheel.sh -Ccmake.define.TILEAOT_ARCHS=90a -Ccmake.define.TILEAOT_OPS='rms_norm*'
# The build runs without isolation because tracing needs tilelang + the CPU torch installed
# here (an isolated build env would resolve torch to a multi-GB CUDA build). Both this script
# and scripts/test.sh install into the current interpreter: run them in a virtualenv (README).
#
# pip shows nothing of the build until it ends, so the build writes its progress to a file
# ($TILEAOT_PROGRESS_FILE, build_tools/progress.py) that `python -m build_tools watch` prints
# as it goes: tracing done/total with an ETA, then compiling done/total with an ETA. The
# report's summary line is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements-build.txt
rm -rf dist/tileaot-*.whl
progress="$(mktemp "${TMPDIR:-/tmp}/tileaot-progress.XXXXXX")"
export TILEAOT_PROGRESS_FILE="$progress"
python -m build_tools watch "$progress" --pid $$ &
watcher=$!
cleanup() {
  echo end >>"$progress"
  wait "$watcher" 2>/dev/null || true
  rm -f "$progress"
}
trap cleanup EXIT
started=$(date +%s)
status=0
python -m pip wheel . --no-build-isolation --no-deps -w dist "$@" || status=$?
cleanup
trap - EXIT
echo "tileaot: pip wheel took $(( $(date +%s) - started )) s (exit ${status})"
if [ "$status" -ne 0 ]; then
  echo "tileaot: the build failed: its messages are above (pip prints the build's output)" >&2
  exit "$status"
fi
python -m build_tools watch --summary build || true
ls -la dist/
