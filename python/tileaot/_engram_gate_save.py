"""The schema of kernel op "engram_gate_save": `tileaot.engram_gate` with
``save_for_backward=True`` (TileKernels' forward saving its backward's statistics)."""

from __future__ import annotations

from . import _arrays
from ._engram_args import check_shapes
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


def forward_saved(key, h, k, v, w_h, w_k, eps, clamp, out):
    """The engram_gate_save launch for dispatch key `key`: ``(out, dot, g, rstd_h, rstd_k)``
    (`out` None or that 5-tuple). Shapes checked as engram_gate's; no short path (training
    calls, one per step). Here rather than in engram_gate.py so that engram_gate_backward can
    run it without importing engram_gate (which imports the backward for autograd)."""
    *_, eps, clamp = check_shapes(h, k, v, w_h, w_k, eps, clamp)
    inputs = {"h": h, "k": k, "v": v, "w_h": w_h, "w_k": w_k}
    bound = SCHEMA.bind(inputs)
    outs = SCHEMA.outputs(_arrays.namespace(h), h, bound, out, inputs)
    if h.numel():
        SCHEMA.launch(key, bound.device, (h, k, v, w_h, w_k, *outs), (eps, clamp), bound.dims)
    return tuple(outs)
