"""MoE token dispatch: rows of x grouped by expert (op "moe_expand")."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _arrays, _lib, _validate

if TYPE_CHECKING:
    import torch

_OP = "moe_expand"
E_MAX = 1024  # the generic variant's limit on num_experts
ALIGN_MAX = 1024  # largest alignment (keeps the padded counts far from int32 overflow)
GROUP = 128  # fp8: columns per x_scale entry
_CHUNK = 1024  # entries per chunk of the counting kernels (kernels_py/moe/moe_expand.py)
# T*K + 32 chunks must stay an int32 (the kernels round T*K up to whole blocks of chunks).
_MAX_ENTRIES = _validate.INT32_LIMIT - 32 * _CHUNK


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
    fw = _arrays.namespace(x)
    fp8 = _dtype(x, "x", (fw.bfloat16, fw.float8_e4m3fn)) is fw.float8_e4m3fn
    _dtype(idx, "idx", (fw.int32,))
    if x.dim() != 2 or idx.dim() != 2 or idx.shape[0] != x.shape[0]:
        raise ValueError(
            f"x must be [T, H] and idx [T, K] with the same T; got x {tuple(x.shape)}, "
            f"idx {tuple(idx.shape)}"
        )
    t, h = x.shape
    k = idx.shape[1]
    e = _int_in("num_experts", num_experts, 1, E_MAX)
    align = _int_in("alignment", alignment, 1, ALIGN_MAX)
    if fp8:
        if x_scale is None:
            raise ValueError(
                f"x is {x.dtype}: pass its scales x_scale [T, H // {GROUP}] (torch.float32)"
            )
        if h % GROUP:
            raise ValueError(
                f"fp8 x needs H % {GROUP} == 0 (one scale per {GROUP} columns); H = {h}"
            )
        _dtype(x_scale, "x_scale", (fw.float32,))
        if x_scale.shape != (t, h // GROUP):
            raise ValueError(
                f"x_scale must be [T, H // {GROUP}] = ({t}, {h // GROUP}); "
                f"got {tuple(x_scale.shape)}"
            )
        names, inputs = ("x", "x_scale", "idx"), (x, x_scale, idx)
    else:
        if x_scale is not None:
            raise ValueError(f"x_scale is only for float8_e4m3fn x; x is {x.dtype}")
        names, inputs = ("x", "idx"), (x, idx)
    device = _validate.check_memory(names, inputs)
    rows = t * k + e * (align - 1)
    if t * k >= _MAX_ENTRIES:
        raise ValueError(
            f"idx has T * K = {t * k} entries; moe_expand handles fewer than {_MAX_ENTRIES} "
            "(32-bit indexing): split the tokens"
        )
    _validate.check_size("x_sorted [T*K + E*(alignment-1), H]", (rows, h))
    shapes_out = [(rows, h), (e + 1,), (t, k)] + ([(rows, h // GROUP)] if fp8 else [])
    dtypes_out = [x.dtype, fw.int32, fw.int32] + ([fw.float32] if fp8 else [])
    names_out = ("out[0] (x_sorted)", "out[1] (expert_offsets)", "out[2] (token_pos)")
    names_out += ("out[3] (x_sorted_scale)",) if fp8 else ()
    if out is None:
        outs = [x.new_empty(s, dtype=d) for s, d in zip(shapes_out, dtypes_out, strict=True)]
    else:
        if not isinstance(out, (tuple, list)) or len(out) != len(shapes_out):
            what = "(x_sorted, expert_offsets, token_pos" + (", x_sorted_scale)" if fp8 else ")")
            raise TypeError(f"out must be a tuple {what}; got {_describe(out)}")
        outs = list(out)
        for name, o, d, s in zip(names_out, outs, dtypes_out, shapes_out, strict=True):
            _validate.check_out(name, o, d, s, device)
        _validate.check_no_overlap(names_out, tuple(outs), names, inputs)
    x_sorted, offsets, token_pos = outs[:3]
    result = MoeExpandResult(x_sorted, offsets, token_pos, outs[3] if fp8 else None)
    if t * k == 0:
        offsets.zero_()
        return result
    chunks = -(-(t * k) // _CHUNK)
    # Scratch: per-chunk expert counts (then their prefixes), per-expert totals, and the copy's
    # work list (one slot per entry), each starting on a 16-byte boundary (as if they were
    # three aligned tensors).
    totals_at = _aligned(chunks * e)
    work_at = totals_at + _aligned(e)
    scratch = x.new_empty(work_at + t * k, dtype=fw.int32)
    counts_ptr = scratch.data_ptr()
    totals_ptr = counts_ptr + totals_at * 4
    work_ptr = counts_ptr + work_at * 4

    # H == 0: x and x_sorted are empty (NULL pointers, which the runtime refuses) while the
    # routing outputs are not; the copy kernels get no column blocks and never touch them.
    def ptr(tensor):
        return tensor.data_ptr() or counts_ptr

    if fp8:
        ptrs = (ptr(x), ptr(x_scale), idx.data_ptr(), ptr(x_sorted))
        ptrs += (ptr(outs[3]), offsets.data_ptr(), token_pos.data_ptr())
    else:
        ptrs = (ptr(x), idx.data_ptr(), ptr(x_sorted), offsets.data_ptr())
        ptrs += (token_pos.data_ptr(),)
    _lib.native().launch(
        _lib.handle(_OP, "e4m3" if fp8 else "bf16"),
        device,
        _lib.current_stream(device),
        (*ptrs, counts_ptr, totals_ptr, work_ptr),
        _flat_shapes(t, h, k, e, rows, fp8),
        (align,),
    )
    return result


def _flat_shapes(t: int, h: int, k: int, e: int, rows: int, fp8: bool) -> tuple[int, ...]:
    """Every tensor's dims in the kernel's parameter order, concatenated (what the runtime
    checks): x, (x_scale), idx, x_sorted, (x_sorted_scale), expert_offsets, token_pos, then
    the scratch: per-chunk counts, per-expert totals, the work list."""
    chunks = -(-(t * k) // _CHUNK)
    tail = (e + 1, t, k, chunks, e, e, t * k)
    if fp8:
        g = h // GROUP
        return (t, h, t, g, t, k, rows, h, rows, g) + tail
    return (t, h, t, k, rows, h) + tail


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    t, h, k, e, rows = 4096, 7168, 8, 256, 4096 * 8 + 256 * 15
    if key == "e4m3":
        return "x[4096, 7168] e4m3, idx[4096, 8], E=256", _flat_shapes(t, h, k, e, rows, True)
    return "x[4096, 7168], idx[4096, 8], E=256", _flat_shapes(t, h, k, e, rows, False)


def _aligned(n: int) -> int:
    """`n` int32s rounded up to a multiple of 4 (16 bytes)."""
    return -(-n // 4) * 4


# --- argument checks beyond _validate (fp8 and int32 dtypes, bounded ints); moe_reduce uses
# them too ---------------------------------------------------------------------------------


def _dtype(t: Any, name: str, allowed: tuple[Any, ...]) -> Any:
    """The dtype of tensor `t`, which must be one of `allowed` (torch dtypes)."""
    _validate.require_tensor(name, t)
    if t.dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise TypeError(f"{name} has dtype {t.dtype}; supported: {names}")
    return t.dtype


def _int_in(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi]; TypeError for bools, floats and other non-integers."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        value = operator.index(value)  # numpy / torch integer scalars
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}]; got {value}")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__
