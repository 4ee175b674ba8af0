"""Loading a kernels module's KernelSpecs (a leaf module, shared by generate, the tracing
workers, shard merging and the HIP emitter)."""

from __future__ import annotations

import importlib


def load_specs(module: str = "kernels_py"):
    """The KernelSpecs of `module` (its all_specs()); tests use small modules of their own."""
    return importlib.import_module(module).all_specs()
