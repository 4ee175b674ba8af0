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


def kernel_sf(shape: tuple, fmt: str, block: tuple, col: bool, packed: bool, device="cpu"):
    """The (unwritten) scales TileKernels' kernels return for a cast of `shape` with these
    options (its allocation and epilogue, `tile_kernels.quant.common`): their dtype, shape and
    strides."""
    tk()
    common = importlib.import_module("tile_kernels.quant.common")
    config = common.get_cast_output_config(fmt, block, col, False, packed)
    sf = common.alloc_scaling_factors(shape, config, device=device)
    return common.cast_epilogue(sf, *shape, config)


def assert_sf_is_tilekernels(sf, sf_tk, cast: tuple, what: object) -> None:
    """Scales `sf` of a cast (``cast = (x shape, fmt, block, col-major, packed)``) as TileKernels
    returns them: its reference's `sf_tk` bytes, dtype and shape; its kernels' strides, and its
    reference's too but for one column (there its reference's ``.T.contiguous()`` copies
    nothing, so the view keeps column stride 1: the same memory); column-major: the whole
    zero-padded buffer behind the view as its reference's (padding, packed bytes' order)."""
    import torch

    kernel = kernel_sf(*cast, device=sf.device)
    assert (sf.dtype, sf.shape, sf.stride()) == (kernel.dtype, kernel.shape, kernel.stride()), what
    assert (sf.dtype, sf.shape) == (sf_tk.dtype, sf_tk.shape), what
    assert sf.shape[1] == 1 or sf.stride() == sf_tk.stride(), what
    a, b = (v.new_empty(v.shape).copy_(v).view(torch.uint8) for v in (sf, sf_tk))  # dense
    assert torch.equal(a, b), what
    if cast[3]:  # the buffers: ours is exactly the padded one, and so is the reference's
        empty = torch.empty(0, dtype=torch.uint8, device=sf.device)
        bufs = [empty.clone().set_(v.untyped_storage()) for v in (sf, sf_tk)]
        assert sf.storage_offset() == sf_tk.storage_offset() == 0, what
        assert torch.equal(*bufs), what
