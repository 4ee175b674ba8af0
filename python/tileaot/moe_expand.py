"""MoE token dispatch: rows of x grouped by expert (op "moe_expand")."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _arrays, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "moe_expand"
E_MAX = 1024  # the generic variant's limit on num_experts
ALIGN_MAX = 1024  # largest alignment (keeps the padded counts far from int32 overflow)
GROUP = 128  # fp8: columns per x_scale entry
_CHUNK = 1024  # entries per chunk of the counting kernels (kernels_py/moe/moe_expand.py)
# T*K + 32 chunks must stay an int32 (the kernels round T*K up to whole blocks of chunks).
_MAX_ENTRIES = _validate.INT32_LIMIT - 32 * _CHUNK
# The scratch: per-chunk expert counts (then their prefixes), per-expert totals and the copy's
# work list (one slot per entry). x_sorted has P rows, the most any routing can fill.
SCHEMA = OpSchema(
    _OP,
    f"x[T, H]: X, x_scale?[T, H // {GROUP}]: fp32, idx[T, K]: i32"
    f" -> x_sorted[P, H]: X, x_sorted_scale?[P, H // {GROUP}]: fp32 if x_scale,"
    " expert_offsets[E + 1]: i32, token_pos[T, K]: i32,"
    " scratch chunk_counts[NC, E]: i32, scratch expert_counts[E]: i32, scratch work[T * K]: i32;"
    " alignment: int32",
    dtypes={"X": ("bf16", "e4m3")},
    fields={"X": "dtype"},
    key="{X}",
    select={"x_scale": ("X", "e4m3", None)},
    sizes={"P": "T * K + E * (A - 1)", "NC": f"(T * K + {_CHUNK - 1}) // {_CHUNK}"},
    public={"E": "num_experts", "A": "alignment"},
    order=("x_sorted", "expert_offsets", "token_pos", "x_sorted_scale"),
    example={"T": 4096, "H": 7168, "K": 8, "E": 256, "A": 16},
)


class MoeExpandResult(NamedTuple):
    """What `moe_expand` returns (a tuple: ``x_sorted, offsets, pos, scale = moe_expand(...)``)."""

    x_sorted: torch.Tensor
    expert_offsets: torch.Tensor
    token_pos: torch.Tensor
    x_sorted_scale: torch.Tensor | None


def moe_expand(
    x: torch.Tensor,
    idx: torch.Tensor,
    num_experts: int,
    alignment: int = 16,
    x_scale: torch.Tensor | None = None,
    *,
    out: tuple[torch.Tensor, ...] | None = None,
) -> MoeExpandResult:
    """Gather the rows of `x` into one contiguous group per expert (MoE dispatch).

    Each (token ``t``, slot ``j``) with ``0 <= idx[t, j] < num_experts`` copies row ``x[t]``
    into the group of expert ``idx[t, j]``. Groups follow each other in expert order; inside a
    group rows are ordered by token, then slot (deterministic, no atomics decide the order).
    Expert ``e``'s group occupies rows ``[expert_offsets[e], expert_offsets[e + 1])``: its
    ``count[e]`` routed rows, then zero rows up to a multiple of `alignment` (an expert with no
    tokens gets an empty group). For fp8 input the per-128-column scales travel with the rows.

    ``x_sorted`` is allocated with ``P = T*K + num_experts*(alignment - 1)`` rows, the most any
    routing can fill, so the call never waits for the GPU; ``expert_offsets[-1]`` (on the GPU)
    is the number of rows used. Rows at or past it are left unwritten (undefined).

    Args:
        x: CUDA tensor ``[T, H]``, ``torch.bfloat16`` or ``torch.float8_e4m3fn`` (then
            ``H % 128 == 0`` and `x_scale` is required); contiguous, 16-byte-aligned.
        idx: ``[T, K]`` ``torch.int32`` expert of each (token, slot), same device, contiguous,
            aligned. ``-1`` marks a dropped slot. Values are not checked on the host (that would
            need a sync): every value outside ``[0, num_experts)`` counts as dropped and is
            never used as an index.
        num_experts: ``E``, an int in ``[1, 1024]``.
        alignment: group size multiple, an int in ``[1, 1024]`` (typically 1, 16 or 128: the
            M tile of the grouped GEMM that consumes ``x_sorted``).
        x_scale: ``[T, H // 128]`` ``torch.float32`` scales of fp8 `x` (``x[t, c]`` means
            ``x[t, c] * x_scale[t, c // 128]``); must be None for bf16 `x`.
        out: optional ``(x_sorted, expert_offsets, token_pos)`` (bf16) or ``(x_sorted,
            expert_offsets, token_pos, x_sorted_scale)`` (fp8) to write into, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, aligned, not overlapping
            the inputs or each other.

    Returns:
        A `MoeExpandResult` tuple ``(x_sorted, expert_offsets, token_pos, x_sorted_scale)``:
        `x_sorted` ``[P, H]`` in the dtype of `x`; `expert_offsets` ``[E + 1]`` ``torch.int32``
        (``expert_offsets[0] == 0``); `token_pos` ``[T, K]`` ``torch.int32``, the row of
        `x_sorted` holding each (token, slot), ``-1`` where dropped (feed it to
        `tileaot.moe_reduce`); `x_sorted_scale` ``[P, H // 128]`` ``torch.float32`` (padding
        rows 0) for fp8, else None. With ``T * K == 0`` nothing is launched: `expert_offsets`
        is zeroed and `x_sorted` left unwritten.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `num_experts` or
            `alignment` is not an int; `out` is not a tuple of the right length.
        ValueError: `x` or `idx` is not 2-D or their T differ; fp8 `x` without `x_scale`, with
            ``H % 128 != 0`` or a wrongly shaped `x_scale`; bf16 `x` with `x_scale`;
            `num_experts` or `alignment` outside ``[1, 1024]``; a tensor is not on a CUDA
            device (the same one), not contiguous or not 16-byte aligned; a size reaches 2**31
            (``P * H``, ``T * K``); `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, sizes or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernels (count, scan, rank, copy) are enqueued in order on torch's current stream of
    `x`'s device; the call returns without synchronising. Besides the outputs it allocates an
    int32 scratch of about ``T * K`` entries (the copy's work list, the per-chunk counts).
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> idx = torch.randint(0, 256, (4096, 8), dtype=torch.int32, device="cuda")
        >>> xs, offsets, pos, _ = tileaot.moe_expand(x, idx, 256, alignment=128)
        >>> n = int(offsets[-1])  # rows used (a sync, only for the example)
        >>> torch.equal(xs[pos[0, 0]], x[0])
        True
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(moe_expand, locals())
    e = _int_in("num_experts", num_experts, 1, E_MAX)
    align = _int_in("alignment", alignment, 1, ALIGN_MAX)
    inputs = {"x": x, "x_scale": x_scale, "idx": idx}
    # x_scale is required with fp8 x and refused otherwise (the schema's `select`).
    bound = SCHEMA.bind(inputs, E=e, A=align)
    dims = bound.dims
    fp8 = x_scale is not None
    if fp8 and dims["H"] % GROUP:
        raise ValueError(
            f"fp8 x needs H % {GROUP} == 0 (one scale per {GROUP} columns); H = {dims['H']}"
        )
    entries = dims["T"] * dims["K"]
    if entries >= _MAX_ENTRIES:
        raise ValueError(
            f"idx has T * K = {entries} entries; moe_expand handles fewer than {_MAX_ENTRIES} "
            "(32-bit indexing): split the tokens"
        )
    fw = _arrays.namespace(x)
    outs = SCHEMA.outputs(fw, x, bound, out, inputs)
    result = MoeExpandResult(*outs, *(() if fp8 else (None,)))
    if entries == 0:
        result.expert_offsets.zero_()
        return result
    x_sorted, offsets, token_pos, x_sorted_scale = result
    tensors = (x, x_scale, idx, x_sorted, x_sorted_scale, offsets, token_pos)
    workspace = SCHEMA.workspace(fw, x, dims)
    SCHEMA.launch(bound.picked["X"], bound.device, (*tensors, workspace), (align,), dims)
    return result


example_shapes = SCHEMA.example_shapes


# --- argument checks beyond the schema ----------------------------------------------------


def _int_in(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi]; TypeError for bools, floats and other non-integers."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        value = operator.index(value)  # numpy / torch integer scalars
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}]; got {value}")
    return value
