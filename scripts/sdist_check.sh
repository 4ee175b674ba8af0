#!/usr/bin/env bash
# CI: the source distribution builds without tilelang and torch.
#
# Makes a reduced sdist here (tracing needs tilelang: one op's bf16 variants for sm_90a keep it
# short), then, in a fresh virtualenv holding only the build tools and NVRTC from PyPI, builds
# a wheel from it, installs it and lists its variants. Fails if tilelang or torch is importable
# in that virtualenv, or if the wheel lacks the variants the sdist was made for.
#
#   bash scripts/sdist_check.sh              # work folder build/sdist-check (kept for a look)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${TILEAOT_SDIST_WORK:-$PWD/build/sdist-check}
ARCHS=90a
OPS='rms_norm_bf16*'
VENV="$WORK/venv"
PY="$VENV/bin/python"

rm -rf "$WORK/dist" "$WORK/wheel"
python -m build_tools sdist --archs "$ARCHS" --ops "$OPS" --work "$WORK" --out "$WORK/dist"
sdist=$(ls "$WORK"/dist/tileaot-*.tar.gz)

# Fresh, without the system site-packages: nothing of this machine's Python leaks in.
python -m venv --clear "$VENV"
export PYTHONNOUSERSITE=1
unset PYTHONPATH
"$PY" -m pip install -q scikit-build-core nanobind cmake ninja \
  'nvidia-cuda-nvrtc-cu12==12.9.*' 'nvidia-cuda-runtime-cu12==12.9.*' 'nvidia-cuda-cccl-cu12==12.9.*'
"$PY" - <<'EOF'
import importlib.util, sys
present = [m for m in ("tilelang", "torch") if importlib.util.find_spec(m)]
if present:
    sys.exit(f"sdist check: {present} importable in the build venv; the check would prove nothing")
print("sdist check: tilelang and torch are not importable in the build venv")
EOF

# --no-index: the build must need nothing beyond what is installed (an offline machine).
"$PY" -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$WORK/wheel" "$sdist"
"$PY" -m pip install -q --no-deps --no-index --force-reinstall "$WORK"/wheel/tileaot-*.whl

cd "$WORK"  # not the checkout: import the installed package
"$PY" -m tileaot info
# The wheel serves exactly the (variant, arch) rows the sdist bundles.
tar -xzf "$sdist" -O "$(basename "$sdist" .tar.gz)/gen/manifest.json" > bundled-manifest.json
"$PY" - bundled-manifest.json <<'EOF'
import json, sys
from tileaot import _lib
want = {(v["name"], v["arch"]) for v in json.load(open(sys.argv[1]))["variants"]}
have = {(v["name"], v["arch"]) for v in _lib.native().variants()}
if not want or have != want:
    sys.exit(f"sdist check: wheel variants {sorted(have)} != bundled {sorted(want)}")
print(f"sdist check: the wheel serves all {len(want)} bundled (variant, arch) rows")
EOF
echo "sdist check: OK, $(basename "$sdist") built without tilelang or torch"
