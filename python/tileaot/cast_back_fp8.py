"""Op "cast_back_fp8": the FP8 path of `tileaot.cast_back`.

The public function is `tileaot.cast_back`; this module names the kernel op so that
`python -m tileaot info` finds its example call and `build_tools` its schema.
"""

from __future__ import annotations

from .cast_back import SCHEMA, cast_back, example_shapes

__all__ = ["SCHEMA", "cast_back", "example_shapes"]
