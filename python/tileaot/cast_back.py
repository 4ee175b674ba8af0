"""Dequantisation of the casts' outputs: ``x = float(q) * scale`` (FP8 op "cast_back_fp8";
packed FP4 goes to `tileaot._cast_back_fp4`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "cast_back_fp8"
GROUP = 128  # g128 group width and block128 block side
LAYOUTS = ("g128", "token", "block128", "g32", "g64")
_NARROW = {"g32": 32, "g64": 64}  # the narrower groups' widths
# The scale's shape [R, C] under each layout, over q's [M, N].
_SCALE_DIMS = {
    "g128": {"R": "M", "C": f"N // {GROUP}"},
    "token": {"R": "M", "C": 1},
    "block128": {"R": f"(M + {GROUP - 1}) // {GROUP}", "C": f"(N + {GROUP - 1}) // {GROUP}"},
    **{name: {"R": "M", "C": f"N // {width}"} for name, width in _NARROW.items()},
}


def _by_key(key: str) -> dict[str, int | str]:
    """A key "bf16,g128" fixes the out dtype and the scale's shape (its layout's)."""
    out, _, layout = key.partition(",")
    return {"Out": out, **_SCALE_DIMS.get(layout, {})}


def _key_of(args: dict) -> Any:
    """The key of a call for torch's fake: the out dtype is all its outputs need (the layout
    changes no output); packed FP4 q goes to the FP4 schema."""
    out_dtype = args["out_dtype"]
    out = "bf16" if out_dtype is None else short_of(out_dtype)
    if short_of(args["q"].dtype) != "u8":
        return out
    from ._cast_back_fp4 import SCHEMA as FP4

    scale_format = "ue8m0" if short_of(args["scale"].dtype) == "u8" else "e4m3"
    return FP4, f"{out},g{args['group_size']},{scale_format}"


SCHEMA = OpSchema(
    _OP,
    "q[M, N]: e4m3, scale[R, C]: fp32 -> x[M, N]: Out as out",
    dtypes={"Out": ("bf16", "fp32")},
    key="{Out},{layout}",
    keyed=_by_key,
    key_of=_key_of,
    example={"M": 4096, "N": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
# The kernel's CTA owns 32 rows (kernels_py/quant/cast_back_fp8.py TILE_ROWS) and gridDim.y
# stops at 65535: taller inputs are cut into launches of at most 65535 * 32 rows, rounded down
# to a multiple of 128 (whole scale blocks).
_ROWS_PER_LAUNCH = 65535 * 32 // GROUP * GROUP
_FP4_MODULE = __name__.rpartition(".")[0] + "._cast_back_fp4"
# out dtype -> key name: DLPack dtypes now, torch's added on first use (torch is imported lazily)
_OUT_SHORT: dict[Any, str] = {_arrays.DTYPES["bfloat16"]: "bf16", _arrays.DTYPES["float32"]: "fp32"}
_KEYS = {(o, lay): f"{o},{lay}" for o in SCHEMA.dtypes["Out"] for lay in LAYOUTS}


def cast_back(
    q: torch.Tensor,
    scale: torch.Tensor,
    *,
    layout: str | None = None,
    group_size: int | None = None,
    out_dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dequantise FP8 (or packed FP4) values: ``x = float(q) * scale``, scale broadcast.

    The inverse of `per_token_cast_fp8` (``group_size`` 32, 64, 128 or per token) and
    `per_block_cast_fp8`. For FP8 `q` each element is one float32 multiply of the exact E4M3
    value by its scale, rounded once to `out_dtype` (round to nearest even): the result is
    exact, bit for bit, against ``(q.float() * scale_broadcast).to(out_dtype)``.

    The scale layout of FP8 `q` ``[M, N]`` follows from ``scale.shape`` (or `layout`):

    * ``"g128"``: ``[M, N // 128]``, one scale per row and 128 columns (``N % 128 == 0``);
    * ``"g32"``, ``"g64"``: ``[M, N // 32]``, ``[M, N // 64]`` alike (`per_token_cast_fp8`'s
      ``group_size=32``, ``64``);
    * ``"token"``: ``[M, 1]``, one scale per row;
    * ``"block128"``: ``[ceil(M / 128), ceil(N / 128)]``, one per 128x128 block.

    A shape that fits several layouts (``M == 1``, or ``N <= 128``) means the same scale for
    every element under each of them, so which one is taken (the first in the order above)
    does not change the result.

    Args:
        q: CUDA tensor ``[M, N]``, ``torch.float8_e4m3fn``; or ``torch.uint8`` packed FP4
            (E2M1 pairs) as `per_token_cast_fp4` writes, handed to its own kernel with
            `group_size`, `out_dtype` and `out` (see `tileaot._cast_back_fp4`). Contiguous,
            16-byte aligned. The fast path needs ``N % 8 == 0`` (``N % 4 == 0`` for float32
            output); other N work, slower.
        scale: CUDA tensor ``torch.float32`` of one of the shapes above (FP8), on the device
            of `q`, contiguous, 16-byte aligned.
        layout: ``None`` (infer from ``scale.shape``), ``"g128"``, ``"token"``,
            ``"block128"``, ``"g32"`` or ``"g64"``; if given, ``scale.shape`` must be that
            layout's.
        group_size: FP8: ``None``, ``128`` (the ``g128`` or ``block128`` layout), ``32`` or
            ``64`` (``g32``, ``g64``) or ``N``
            (``token``); it only narrows the inference. FP4: the group size, as
            `per_token_cast_fp4` took it.
        out_dtype: ``torch.bfloat16`` (``None``, the default) or ``torch.float32``.
        out: optional tensor to write into instead of allocating: ``[M, N]`` of `out_dtype`
            on the device of `q`, contiguous, 16-byte aligned, not overlapping `q` or `scale`.

    Returns:
        `x` ``[M, N]`` of `out_dtype` (`out` itself if given). If `q` has no elements nothing
        is launched.

    Raises:
        TypeError: `q`/`scale`/`out` is not a tensor or has a wrong dtype; `out_dtype` is not
            ``torch.bfloat16`` / ``torch.float32``; `layout` is not a string; `group_size` is
            not an int or None.
        ValueError: `q` or `scale` is not 2-D; `scale.shape` fits no layout (or not the one
            given); `layout`/`group_size` is unknown; a tensor is not on a CUDA device (the
            same one), not contiguous or not 16-byte aligned; a dimension or element count
            reaches 2**31; `out` has a wrong shape or overlaps.
        NotImplementedError: `q` is packed FP4 but this build has no FP4 dequantisation.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the key, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `q`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, s = tileaot.per_token_cast_fp8(x)  # s: [4096, 56]
        >>> x_hat = tileaot.cast_back(q, s)  # bf16 [4096, 7168], layout g128
        >>> qb, sb = tileaot.per_block_cast_fp8(x)  # sb: [32, 56]
        >>> xb = tileaot.cast_back(qb, sb, out_dtype=torch.float32)  # layout block128
    """
    if (
        type(q) is _arrays.Tensor
        and type(scale) is _arrays.Tensor
        and q.dtype is _arrays._torch.float8_e4m3fn  # packed FP4 (uint8) q: the checked path
        and group_size is None
        and (layout is None or type(layout) is str)
        and (out_dtype is None or type(out_dtype) is type(q.dtype))
        and q.dim() == 2 == scale.dim()
        and q.shape[0] <= _ROWS_PER_LAUNCH
    ):
        m, n = q.shape
        lay = layout
        if lay is None:  # what `_layout` infers: the first of LAYOUTS that fits
            s_rows, s_cols = scale.shape
            lay = "block128"
            if s_rows == m and (s_cols * GROUP == n or s_cols == 1):
                lay = "g128" if s_cols * GROUP == n else "token"
            elif s_rows == m and n in (s_cols * 32, s_cols * 64):  # block128 cannot fit here
                lay = "g32" if s_cols * 32 == n else "g64"
        dt = _arrays._torch.bfloat16 if out_dtype is None else out_dtype
        x = q.new_empty(m, n, dtype=dt) if out is None else out
        if _lib.fast((_OP, dt, lay), (q, scale, x), (), _WRITES):
            return x
    elif type(q) is not _arrays.Tensor and _arrays.foreign(q):
        return _arrays.call(cast_back, locals())
    fw = _arrays.namespace(q)
    _validate.require_tensor("q", q)
    if out_dtype is None:
        out_dtype = fw.bfloat16
    if q.dtype is fw.uint8:
        return _fp4(q, scale, layout, group_size, out_dtype, out)
    if q.dtype is not fw.float8_e4m3fn:
        raise TypeError(
            f"q has dtype {q.dtype}; supported: torch.float8_e4m3fn, torch.uint8 (packed FP4)"
        )
    inputs = {"q": q, "scale": scale}
    bound = SCHEMA.bind(inputs)
    out_key = _OUT_SHORT.get(out_dtype) if isinstance(out_dtype, fw.dtype) else None
    if out_key is None:
        out_key = _out_key(fw, out_dtype)
    m, n = bound.dims["M"], bound.dims["N"]
    layout = _layout(m, n, tuple(scale.shape), layout, group_size)
    key = _KEYS[out_key, layout]
    SCHEMA.fix(bound, key)
    (x,) = SCHEMA.outputs(fw, q, bound, out, inputs)
    if m == 0 or n == 0:
        return x
    if m <= _ROWS_PER_LAUNCH:
        handle = SCHEMA.launch(key, bound.device, (q, scale, x), (), bound.dims)
        if type(q) is _arrays.Tensor:  # one launch over (q, scale, x): what the short path passes
            _lib.learn((_OP, out_dtype, layout), handle)
        return x
    # Row slices of whole scale blocks, by pointer offsets (DLPack views cannot be sliced).
    handle, native, dims = _lib.handle(_OP, key), _lib.native(), bound.dims
    stream = _lib.current_stream(bound.device)
    q_ptr, s_ptr, x_ptr = q.data_ptr(), scale.data_ptr(), x.data_ptr()
    row_bytes, scale_row_bytes = n * x.element_size(), dims["C"] * 4
    for r0 in range(0, m, _ROWS_PER_LAUNCH):  # one launch unless M > 2,097,024
        rows = min(m - r0, _ROWS_PER_LAUNCH)
        block = layout == "block128"
        s_first, s_rows = (r0 // GROUP, -(-rows // GROUP)) if block else (r0, rows)
        ptrs = (q_ptr + r0 * n, s_ptr + s_first * scale_row_bytes, x_ptr + r0 * row_bytes)
        shapes = SCHEMA.flat({**dims, "M": rows, "R": s_rows})
        native.launch(handle, bound.device, stream, ptrs, shapes, ())
    return x


def _out_key(fw: Any, out_dtype: Any) -> str:
    """The slow path of the out dtype's key name: registers `fw`'s dtypes once, else raises."""
    if fw.bfloat16 not in _OUT_SHORT:
        _OUT_SHORT.update({fw.bfloat16: "bf16", fw.float32: "fp32"})
        key = _OUT_SHORT.get(out_dtype) if isinstance(out_dtype, fw.dtype) else None
        if key is not None:
            return key
    raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float32; got {out_dtype!r}")


def _layout(m: int, n: int, shape: tuple[int, ...], layout: Any, group_size: Any) -> str:
    """The FP8 scale layout: the one given (checked against `shape`) or the first that fits."""
    expected = {
        "g128": (m, n // GROUP) if n % GROUP == 0 else None,
        "token": (m, 1),
        "block128": (-(-m // GROUP), -(-n // GROUP)),
        **{name: (m, n // w) if n % w == 0 else None for name, w in _NARROW.items()},
    }
    if group_size is not None:
        group_size = _validate.optional_int("group_size", group_size)
        if group_size == GROUP:
            candidates = ("g128", "block128") if n != GROUP else LAYOUTS
        elif group_size in _NARROW.values():
            candidates = (f"g{group_size}",) if n != group_size else LAYOUTS
        elif group_size == n:
            candidates = ("token",)
        else:
            raise ValueError(
                f"group_size={group_size} is not supported for FP8 q: use None, {GROUP} "
                f"(g128 / block128 scales), 64, 32 (g64, g32) or N = {n} (per token)"
            )
    else:
        candidates = LAYOUTS
    if layout is not None:
        if not isinstance(layout, str):
            raise TypeError(f"layout must be a str or None, got {type(layout).__name__}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout={layout!r} is unknown; supported: {', '.join(LAYOUTS)}")
        if layout not in candidates:
            raise ValueError(f"layout={layout!r} does not match group_size={group_size}")
        candidates = (layout,)
    for name in candidates:
        if expected[name] == shape:
            return name
    fits = "; ".join(
        f"{name}: {list(expected[name])}"
        if expected[name]
        else f"{name}: needs N % {name[1:]} == 0"
        for name in candidates
    )
    raise ValueError(
        f"scale has shape {list(shape)}, which fits no scale layout of q [{m}, {n}] "
        f"(expected {fits})"
    )


def _fp4(q, scale, layout, group_size, out_dtype, out):
    """Packed FP4 input: the FP4 module's kernel, imported only when used."""
    if layout is not None:
        raise ValueError(f"layout={layout!r} applies to FP8 q only; packed FP4 q takes group_size")
    try:
        from ._cast_back_fp4 import cast_back_fp4
    except ModuleNotFoundError as e:
        if e.name != _FP4_MODULE:
            raise
        raise NotImplementedError(
            "cast_back: q is torch.uint8 (packed FP4), and this build of tileaot has no FP4 "
            "dequantisation; pass FP8 (torch.float8_e4m3fn) q"
        ) from None
    return cast_back_fp4(q, scale, group_size=group_size, out_dtype=out_dtype, out=out)


example_shapes = SCHEMA.example_shapes
