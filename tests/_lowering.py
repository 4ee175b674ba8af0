"""Lowering smoke tests' shared pieces: TileLang lowering on the CPU (no GPU, no nvcc)."""

from __future__ import annotations

import importlib.util
import os

import pytest

# Factories import tilelang themselves, so the skip must come before calling them.
needs_tilelang = pytest.mark.skipif(
    importlib.util.find_spec("tilelang") is None, reason="needs tilelang (a build machine)"
)


def lower_source(func, arch: str, name: str) -> str:
    """The device source TileLang generates for prim_func `func` on `arch`, as `name`."""
    os.environ.setdefault("TILELANG_CACHE_DIR", "/tmp/tileaot-tlcache")
    import tilelang
    from tilelang import tvm
    from tvm.target import Target

    target = Target({"kind": "cuda", "arch": arch})
    with tvm.transform.PassContext(opt_level=3), target:
        return tilelang.lower(func.with_attr("global_symbol", name), target=target).kernel_source


def default_arch_sources(factory, name: str, **key: str):
    """(arch, device source) of `factory`'s kernel (key `key`) on each default arch: the
    lowering smoke test of an op with one generic variant."""
    from kernels_py.spec import DEFAULT_ARCHS

    for arch in DEFAULT_ARCHS:
        yield arch, lower_source(factory(arch=arch, **key), arch, name)
