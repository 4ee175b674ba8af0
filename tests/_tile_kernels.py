"""TileKernels' pure-torch references (`tile-kernels` 1.0.0, `tile_kernels.torch`) for parity tests.

TileKernels is the spec where it has an op (DESIGN.md "Must hold" 5): our references must compute
what its `tile_kernels/torch/*` modules compute. The package is pure Python, installed with
``pip install --no-deps tile-kernels==1.0.0`` (scripts/test.sh does). Its `__init__` imports
`tilelang.utils.target`, which TileLang 0.1.15 moved to `tilelang.backend.target`, so the old
name is aliased before the import. Tests that use `tk()` skip where it cannot be imported.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

VERSION = "1.0.0"


def tk(module: str = "") -> ModuleType:
    """`tile_kernels.torch[.module]` (e.g. ``tk("cast")``); skips the test if it is unavailable."""
    try:
        tilelang = importlib.import_module("tilelang")
        sys.modules.setdefault("tilelang.utils.target", tilelang.backend.target)
        importlib.import_module("tile_kernels")
        return importlib.import_module("tile_kernels.torch" + (f".{module}" if module else ""))
    except ImportError as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"needs tile-kernels=={VERSION} and tilelang ({e})")


def calc_diff(x, y) -> float:
    """TileKernels' own test metric (`tile_kernels.testing.numeric.calc_diff`: 1 - cosine
    similarity in float64), so bounds taken from its tests are checked with its function."""
    tk()  # imports tile_kernels (or skips)
    numeric = importlib.import_module("tile_kernels.testing.numeric")
    return float(numeric.calc_diff(x, y))
