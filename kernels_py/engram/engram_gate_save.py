"""Engram gate forward for training: engram_gate's kernels that also save the row statistics.

TileKernels' forward with ``save_for_backward=True`` (`tile-kernels` 1.0.0:
``tile_kernels.engram.engram_gate_fwd``, reference ``tile_kernels.torch.engram.engram_gate_ref``)
returns ``(out, dot, gate_score, rstd_x, rstd_k)``: besides ``out`` and the gate, per row the
raw dot ``sum(h * w_h * k * w_k)`` and the reciprocal RMS of h and of k, fp32 ``[M]`` each. Its
backward consumes exactly those, so a backward fed them (engram_gate_backward.py) matches
TileKernels' bit for bit in what it reads, instead of recomputing them in another summation
order. The math and the kernels are engram_gate.py's (``factory(..., save=True)``); this op
only adds the three stores, so inference calls (op engram_gate) keep their variants unchanged.
"""

from ..spec import KernelSpec
from . import engram_gate


def factory(arch: str, dtype: str, H: int | None = None):
    """TileLang prim_func ``(h, k [M, H], v [MV, H], w_h, w_k [GW, H], out [M, H], dot, g,
    rstd_h, rstd_k [M] fp32, eps, clamp)`` (engram_gate.factory with ``save=True``)."""
    return engram_gate.factory(arch, dtype, H, save=True)


def reference(h, k, v, w_h, w_k, eps: float = 1e-6, clamp_value: float = 1e-6):
    """torch reference ``(out, dot, g, rstd_h, rstd_k)``: engram_gate.statistics."""
    return engram_gate.statistics(h, k, v, w_h, w_k, eps, clamp_value)


SPEC = KernelSpec(
    op="engram_gate_save",
    factory=factory,
    keys=engram_gate.SPEC.keys,
    specs=engram_gate.SPEC.specs,
    reference=reference,
    # engram_gate's kernels with three more stores: its declaration holds for them too
    # (verified: build_tools verify-lowering-classes --ops 'engram_gate_save*').
    lowering_classes=engram_gate.SPEC.lowering_classes,
    lowering_reason=engram_gate.SPEC.lowering_reason,
    doc="engram_gate that also saves TileKernels' backward statistics: (out, dot, g, rstd_h, "
    "rstd_k), dot the raw sum(h * w_h * k * w_k), rstd_* the reciprocal RMS of h and k "
    "(fp32 [M] each).",
)
