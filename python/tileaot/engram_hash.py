"""Engram's multi-table n-gram hash: embedding-table indices of each token's n-grams (op
"engram_hash")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "engram_hash"
# offsets' columns are written E * (N - 1), not (N - 1) * E: a mismatch message names the
# tensor that bound the expression's first size ("to match vocab_sizes", where E came from).
SCHEMA = OpSchema(
    _OP,
    "ngram_token_ids[T, N]: i32, multipliers[L, N]: i64, vocab_sizes[L, N - 1, E]: i32, "
    "offsets[L, E * (N - 1)]: i32 -> output[L, T, E * (N - 1)]: i32 as out",
    key="i32",
    example={"T": 4096, "N": 3, "L": 2, "E": 8},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path


def engram_hash(
    ngram_token_ids: torch.Tensor,
    multipliers: torch.Tensor,
    vocab_sizes: torch.Tensor,
    offsets: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Engram's n-gram hash (TileKernels 1.0.0's ``engram_hash``), bit for bit: for each of L
    hash layers, each token's embedding-table indices, one per n-gram order and table.

    Row ``t`` of `ngram_token_ids` holds the token and its ``N - 1`` predecessors
    (``N = max_ngram_size``). For layer ``l`` and order ``n = 2 .. N`` the hash is the XOR of
    the first ``n`` int64 products ``ngram_token_ids[t, i] * multipliers[l, i]`` (wrapping),
    and for each of the E tables of that order::

        c = (n - 2) * E + j
        output[l, t, c] = int32(hash mod vocab_sizes[l, n - 2, j]) + offsets[l, c]

    ``mod`` is the floor remainder (the sign of the table size, as torch's ``%``); the int32
    sum wraps. With TileKernels' ``make_offsets(vocab_sizes)`` as `offsets`, the indices
    address one concatenated embedding per layer.

    Differences from TileKernels: ``out=`` is accepted; nothing else. A table size of 0 is
    not checked (reading the sizes would synchronise): its indices are undefined, as in
    TileKernels' kernel (its torch reference raises).

    Args:
        ngram_token_ids: CUDA tensor ``[T, N]`` of ``torch.int32`` token ids, ``N >= 2``.
        multipliers: ``[L, N]`` ``torch.int64`` hash multipliers per layer and position.
        vocab_sizes: ``[L, N - 1, E]`` ``torch.int32`` table sizes per layer, order and table.
        offsets: ``[L, (N - 1) * E]`` ``torch.int32`` index offsets per layer and table.
        out: optional ``[L, T, (N - 1) * E]`` ``torch.int32`` tensor to write into instead of
            allocating, on the same device, contiguous, aligned, overlapping no input.

        All tensors on one CUDA device, contiguous, with 16-byte-aligned data pointers.

    Returns:
        ``output``, ``[L, T, (N - 1) * E]`` ``torch.int32`` (`out` if given). With ``T``,
        ``L`` or ``E`` zero nothing is launched.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype (int64 token ids: pass
            ``ngram_token_ids.int()``, as TileKernels' kernel takes).
        ValueError: a shape does not match the others (the message says which), ``N < 2``; a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a dimension or element count reaches 2**31; `out` has the wrong shape or
            overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `ngram_token_ids`' device (as torch
    ops are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (TileKernels' defaults: 3-grams, 2 layers, 8 tables per order):
        >>> import torch, tileaot
        >>> ids = torch.randint(0, 129280, (4096, 3), dtype=torch.int32, device="cuda")
        >>> mult = torch.randint(1, 2**40, (2, 3), device="cuda")  # int64
        >>> sizes = torch.randint(1000, 2000, (2, 2, 8), dtype=torch.int32, device="cuda")
        >>> flat = sizes.flatten(1)
        >>> offsets = (flat.cumsum(1, dtype=torch.int32) - flat).contiguous()
        >>> idx = tileaot.engram_hash(ids, mult, sizes, offsets)  # [2, 4096, 16] int32
    """
    if (
        type(ngram_token_ids) is _arrays.Tensor
        and type(vocab_sizes) is _arrays.Tensor
        and type(offsets) is _arrays.Tensor
        and _related(ngram_token_ids.shape, vocab_sizes.shape, offsets.shape)
        and (out is None or type(out) is _arrays.Tensor)
    ):
        y = out
        if y is None:
            shape = (vocab_sizes.shape[0], ngram_token_ids.shape[0], offsets.shape[1])
            y = ngram_token_ids.new_empty(shape)
        tensors = (ngram_token_ids, multipliers, vocab_sizes, offsets, y)
        if _lib.fast((_OP, "i32"), tensors, (), _WRITES):
            return y
    elif type(ngram_token_ids) is not _arrays.Tensor and _arrays.foreign(ngram_token_ids):
        return _arrays.call(engram_hash, locals())
    inputs = {
        "ngram_token_ids": ngram_token_ids,
        "multipliers": multipliers,
        "vocab_sizes": vocab_sizes,
        "offsets": offsets,
    }
    bound = SCHEMA.bind(inputs)
    if bound.dims["N"] < 2:
        raise ValueError(
            f"ngram_token_ids has shape {tuple(ngram_token_ids.shape)}: max_ngram_size (its "
            "last dim) must be >= 2, an n-gram hash needs a token and at least one predecessor"
        )
    (y,) = SCHEMA.outputs(_arrays.namespace(ngram_token_ids), ngram_token_ids, bound, out, inputs)
    if y.numel() == 0:
        return y
    handle = SCHEMA.launch("i32", bound.device, (*inputs.values(), y), (), bound.dims)
    if type(ngram_token_ids) is _arrays.Tensor:  # the short path passes these same tensors
        _lib.learn((_OP, "i32"), handle)
    return y


def _related(ids: tuple, sizes: tuple, offsets: tuple) -> bool:
    """The short path's guard on what the generic kernel does not tie itself (it reads N - 1
    and (N - 1) * E off their own dims): ranks, N >= 2, and those two products."""
    return (
        len(ids) == 2
        and len(sizes) == 3
        and len(offsets) == 2
        and ids[1] >= 2
        and sizes[1] == ids[1] - 1
        and offsets[1] == sizes[1] * sizes[2]
    )


example_shapes = SCHEMA.example_shapes
