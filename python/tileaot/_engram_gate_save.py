"""The schema of kernel op "engram_gate_save": `tileaot.engram_gate` with
``save_for_backward=True`` (TileKernels' forward saving its backward's statistics)."""

from __future__ import annotations

from ._schema import OpSchema

# engram_gate's tensors (python/tileaot/engram_gate.py) plus, after out, TileKernels' saved
# statistics in the order its forward returns them: the raw dot, the gate, rstd of h and of k.
SCHEMA = OpSchema(
    "engram_gate_save",
    "h[*M, H]: T, k[*M, H]: T, v[*MV, H]: T, w_h[*GW, H]: T, w_k[*GW, H]: T"
    " -> out[*M, H]: T, dot[*M]: fp32, g[*M]: fp32, rstd_h[*M]: fp32, rstd_k[*M]: fp32;"
    " eps: float32, clamp: float32",
    dtypes={"T": ("bf16", "fp32")},
    example={"M": 4 * 4096, "H": 7168, "MV": 4 * 4096, "GW": 4},  # h [4096, 4, 7168]
)

example_shapes = SCHEMA.example_shapes
