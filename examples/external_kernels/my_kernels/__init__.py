"""An example kernels module kept outside tileaot's kernels_py: what `python -m build_tools wheel
--kernels` builds (see ../README.md). One op per file, each exposing ``SPEC``; ``all_specs()``
is the one thing the build asks of the module. Importing it needs neither tilelang nor torch.
"""

from __future__ import annotations

from .scaled_add import SPEC as SCALED_ADD


def all_specs():
    """The KernelSpec of every op of this module (each carries its schema in ``extra``)."""
    return [SCALED_ADD]
