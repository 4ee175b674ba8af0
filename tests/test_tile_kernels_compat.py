"""CPU tests of `tileaot.tile_kernels`, the TileKernels-compatible API (issues 18.6, 19.3).

(a) every exported function exists in `tile-kernels` 1.0.0 under the same module path, with the
same parameters (names, kinds, order, defaults): read from TileKernels' own functions with
`inspect.signature`; (b) a call reaches the tileaot op a direct call with the mapped arguments
reaches, with the same launch (recording fake, tests/_fakes.py), and returns TileKernels'
dtypes and shapes; (c) every option tileaot does not serve raises one NotImplementedError line
naming the argument and its value, before anything is launched.
"""

from __future__ import annotations

import importlib
import inspect
import itertools

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, t, tileaot  # noqa: E402, F401
from _tile_kernels import assert_sf_is_tilekernels, kernel_sf, tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

_lib = importlib.import_module("tileaot._lib")
compat = importlib.import_module("tileaot.tile_kernels")
served = importlib.import_module("tileaot.tile_kernels._served")
quant, moe = compat.quant, compat.moe
ops = compat.modeling.mhc.ops
F8, F32, BF16, I32 = torch.float8_e4m3fn, torch.float32, torch.bfloat16, torch.int32

# Our compat modules, by their path below `tileaot.tile_kernels` (= TileKernels' below
# `tile_kernels`).
MODULES = ("quant", "moe", "transpose", "engram", "modeling.mhc.ops", "modeling.engram")
MODULES += ("torch", "torch.swiglu")


def _ours(path: str):
    return importlib.import_module(f"tileaot.tile_kernels.{path}")


def _exports() -> list[tuple[str, str]]:
    return [(path, name) for path in MODULES for name in _ours(path).__all__]


def _params(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _their_params(fn) -> list[tuple]:
    """TileKernels' parameters; for an ``autograd.Function.apply`` (``engram_gate``, whose
    own signature is ``*args, **kwargs``) its forward's, without ``ctx``."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        return _params(owner.forward)[1:]
    return _params(fn)


# --- (a) names and signatures ------------------------------------------------------------------


def test_every_compat_module_is_listed():
    """A module added to the package without a place in MODULES would escape (a)."""
    import pkgutil

    found = set()
    for info in pkgutil.walk_packages(compat.__path__, "tileaot.tile_kernels."):
        mod = importlib.import_module(info.name)
        names = getattr(mod, "__all__", ())
        if names and all(inspect.isfunction(getattr(mod, n)) for n in names):
            found.add(info.name.removeprefix("tileaot.tile_kernels."))
    assert found == set(MODULES)


@pytest.mark.parametrize(("path", "name"), _exports(), ids=[f"{p}.{n}" for p, n in _exports()])
def test_signature_is_tilekernels(path, name):
    tk()  # imports tile_kernels (with TileLang's moved module aliased), or skips
    theirs = importlib.import_module(f"tile_kernels.{path}")
    assert hasattr(theirs, name), f"tile_kernels.{path} has no {name}"
    assert _params(getattr(_ours(path), name)) == _their_params(getattr(theirs, name))


# --- (b) the op reached, with the arguments a direct call passes ------------------------------


def _record(fake, call):
    """Run `call` with empty handle caches; return its result, lookups and launches (without
    the pointers: the outputs are fresh allocations each call)."""
    fake.lookups.clear()
    fake.launches.clear()
    _lib._handles.clear()
    _lib._fast.clear()
    result = call()
    launches = [(x.handle, x.device, x.stream, x.shapes, x.scalars) for x in fake.launches]
    return result, list(fake.lookups), launches


def _flat(result) -> list[torch.Tensor]:
    return list(result) if isinstance(result, tuple) else [result]


X = t(8, 256)
X32 = t(8, 256, dtype=F32)
XT = t(128, 64)  # per_channel_cast_and_transpose: tokens a multiple of 128
Q8 = X.to(F8)
S_G128, S_TOK, S_BLOCK = t(8, 2, dtype=F32), t(8, 1, dtype=F32), t(1, 2, dtype=F32)
Q4 = torch.randint(0, 256, (8, 128), dtype=torch.uint8)
QE = torch.randint(0, 256, (8, 384), dtype=torch.uint8)  # packed E5M6 codes, 256 per row
SE_G = t(8, 4, dtype=F32)  # four scales of 64 columns per row
SE_UE8M0 = torch.randint(100, 140, (8, 1), dtype=I32)  # packed-UE8M0 row scales
E4 = torch.randint(100, 140, (8, 8), dtype=torch.uint8)  # UE8M0 bytes of group-32 scales
S4 = served.ue8m0_to_float(E4)
GATE = t(8, 512)
PTT = torch.tensor([0, 3, -1, 5, 2, 7, 1, 4], dtype=I32)
TOPK_W = t(4, 2, dtype=F32)
ROW_W = torch.where(PTT >= 0, TOPK_W.view(-1)[PTT.long().clamp(min=0)], 0.0)
LOGITS, BIAS = t(8, 64, dtype=F32), t(64, dtype=F32)
BWD = (
    Q8,
    S_G128,
    t(8, 128),
    TOPK_W,
    PTT,
    torch.tensor([[0, 6], [4, 1], [7, 3], [-1, 5]], dtype=I32),
)


def _packed_col_major(e: torch.Tensor) -> torch.Tensor:
    """UE8M0 bytes [R, C] as TileKernels' packed scales: a column-major int32 [R, ceil(C/4)]."""
    return quant.tma_scales(e, True, True)


def _unnest(result):
    """swiglu_backward_and_per_token_cast's (out, (q, sf), x_grad, weight_grad), flat."""
    out, (q, sf), x_grad, weight_grad = result
    return out, q, sf, x_grad, weight_grad


Y, POS = t(16, 256), torch.randint(-1, 16, (8, 2), dtype=I32)
OUT32 = t(8, 256, dtype=F32)
SINK = t(3, 4, 4, dtype=F32)
GROUPED = t(8, 8, 8, dtype=F32)
IDX32 = torch.randint(-1, 64, (8, 6), dtype=I32)
IDX64 = IDX32.long()
HID, RES = t(2, 3, 256), t(2, 3, 4, 256)
HID2 = t(5, 256)
Q_FUSED, SF_FUSED, SF_PACKED = HID2.to(F8), t(5, 2, dtype=F32), t(5, 1, dtype=I32)
FUSED_POS = torch.tensor([[0, 8], [9, -1], [4, 1], [2, 3], [10, 16]], dtype=I32)
FUSED_PTE = torch.tensor([0] * 4 + [1] + [-1] * 3 + [2] * 3 + [-1] * 5 + [3] + [-1] * 23, dtype=I32)
MIX, COMB = t(2, 3, 4, 1, dtype=F32), t(2, 3, 4, 4, dtype=F32)
ENG_H, ENG_K, ENG_V, ENG_W = t(2, 4, 256), t(2, 4, 256), t(2, 256), t(4, 256)
GWR_P = t(6, 4, 256, dtype=F32)  # grad_w_reduce's partials (6 blocks)


def GWR_ACC():  # noqa: N802 (a constant's maker: fresh accumulators, updated in place)
    return t(4, 256, dtype=F32), t(4, 256, dtype=F32)


HASH_IDS, HASH_MULT = t(9, 3, dtype=I32), t(2, 3, dtype=torch.int64)
HASH_SIZES, HASH_OFFSETS = t(2, 2, 8, dtype=I32), t(2, 16, dtype=I32)
NORM_FN = t(24, 4 * 256, dtype=F32)
SPLIT_X, SPLIT_SCALE, SPLIT_BASE = t(2, 3, 24, dtype=F32), t(3, dtype=F32), t(24, dtype=F32)
HEAD_X, HEAD_SCALE, HEAD_BASE = t(2, 3, 4, dtype=F32), t(1, dtype=F32), t(4, dtype=F32)

# (id, compat call, direct tileaot call, TileKernels' (dtype, shape) of each result)
CASES = [
    (
        "per_token_cast-e4m3-g128",
        lambda: quant.per_token_cast(X, "e4m3", 128, round_sf=True),
        lambda: tileaot.per_token_cast_fp8(X, 128, round_sf=True),
        [(F8, (8, 256)), (F32, (8, 2))],
    ),
    (
        "per_token_cast-e4m3-g64",
        lambda: quant.per_token_cast(X, "e4m3", 64),
        lambda: tileaot.per_token_cast_fp8(X, 64),
        [(F8, (8, 256)), (F32, (8, 4))],
    ),
    (
        "per_token_cast-e4m3-row",
        lambda: quant.per_token_cast(X32, "e4m3", 256),
        lambda: tileaot.per_token_cast_fp8(X32, None),
        [(F8, (8, 256)), (F32, (8, 1))],
    ),
    (
        "per_token_cast-e4m3-g64-packed-col-major",
        lambda: quant.per_token_cast(X, "e4m3", 64, None, True, False, True),
        lambda: tileaot.per_token_cast_fp8(X, 64),
        [(F8, (8, 256)), (I32, (8, 1))],
    ),
    (
        "per_token_cast-e4m3-row-col-major",
        lambda: quant.per_token_cast(X32, "e4m3", 256, None, True, True),
        lambda: tileaot.per_token_cast_fp8(X32, None, round_sf=True),
        [(F8, (8, 256)), (F32, (8, 1))],
    ),
    (
        "per_token_cast-e5m6",
        lambda: quant.per_token_cast(X, "e5m6", 256, round_sf=True),
        lambda: tileaot.per_token_cast_e5m6(X, round_sf=True),
        [(torch.uint8, (8, 384)), (F32, (8, 1))],
    ),
    (
        "per_token_cast-e5m6-packed-col-major",
        lambda: quant.per_token_cast(X32, "e5m6", 256, None, True, True, True),
        lambda: tileaot.per_token_cast_e5m6(X32, round_sf=True),
        [(torch.uint8, (8, 384)), (I32, (8, 1))],
    ),
    (
        "per_token_cast-e2m1",
        lambda: quant.per_token_cast(X, "e2m1", 32, round_sf=True),
        lambda: tileaot.per_token_cast_fp4(X, 32, "ue8m0"),
        [(torch.int8, (8, 128)), (F32, (8, 8))],
    ),
    (
        "per_token_cast-e2m1-packed-col-major",
        lambda: quant.per_token_cast(X, "e2m1", 16, None, True, True, True),
        lambda: tileaot.per_token_cast_fp4(X, 16, "ue8m0"),
        [(torch.int8, (8, 128)), (I32, (8, 4))],
    ),
    (
        "per_block_cast",
        lambda: quant.per_block_cast(X, "e4m3", (128, 128), round_sf=True),
        lambda: tileaot.per_block_cast_fp8(X, round_sf=True),
        [(F8, (8, 256)), (F32, (1, 2))],
    ),
    (
        "per_block_cast-col-major",
        lambda: quant.per_block_cast(X, "e4m3", (128, 128), True),
        lambda: tileaot.per_block_cast_fp8(X),
        [(F8, (8, 256)), (F32, (1, 2))],
    ),
    (
        "per_block_cast_lossless",
        lambda: quant.per_block_cast_lossless(
            (Q4.view(torch.int8), S4), "e4m3", (1, 32), (128, 128)
        ),
        lambda: tileaot.per_block_cast_lossless(Q4, S4, 1, 32, 128, 128),
        [(F8, (8, 256)), (F32, (1, 2))],
    ),
    (
        "per_block_cast_lossless-packed",
        lambda: quant.per_block_cast_lossless(
            (Q4.view(torch.int8), _packed_col_major(E4)),
            "e4m3",
            (1, 32),
            (1, 128),
            True,
            True,
            True,
        ),
        lambda: tileaot.per_block_cast_lossless(Q4, E4, 1, 32, 1, 128, "ue8m0"),
        [(F8, (8, 256)), (I32, (8, 1))],
    ),
    (
        "per_channel_cast",
        lambda: quant.per_channel_cast(X, "e4m3", 128, round_sf=True),
        lambda: tileaot.per_channel_cast_fp8(X, round_sf=True),
        [(F8, (8, 256)), (F32, (1, 256))],
    ),
    (
        "per_channel_cast_and_transpose-g32",
        lambda: quant.per_channel_cast_and_transpose(XT, "e4m3", 32, True),
        lambda: tileaot.per_channel_cast_and_transpose(XT, 32, round_sf=True),
        [(F8, (64, 128)), (F32, (4, 64))],
    ),
    (
        "per_channel_cast_and_transpose-g128",
        lambda: quant.per_channel_cast_and_transpose(XT, "e4m3", 128),
        lambda: tileaot.per_channel_cast_and_transpose(XT, 128),
        [(F8, (64, 128)), (F32, (1, 64))],
    ),
    (
        "swiglu_forward_and_per_channel_cast_and_transpose",
        lambda: quant.swiglu_forward_and_per_channel_cast_and_transpose(
            XT, "e4m3", 32, True, swiglu_clamp_value=7.0
        ),
        lambda: tileaot.swiglu_per_channel_cast_and_transpose(XT, 32, 7.0, round_sf=True),
        [(F8, (32, 128)), (F32, (4, 32))],
    ),
    (
        "per_channel_cast_fused-gather",
        lambda: quant.per_channel_cast_fused(X, "e4m3", 128, True, None, PTT),
        lambda: tileaot.per_channel_cast_fused(X, PTT, round_sf=True),
        [(F8, (8, 256)), (F32, (1, 256))],
    ),
    (
        "per_channel_cast_fused-fp8",
        lambda: quant.per_channel_cast_fused((Q8, S_G128), "e4m3", 128, False, 128, PTT),
        lambda: tileaot.per_channel_cast_fused(Q8, PTT, x_sf=S_G128),
        [(F8, (8, 256)), (F32, (1, 256))],
    ),
    (
        "per_channel_cast_fused-plain",
        lambda: quant.per_channel_cast_fused(X, "e4m3", 128),
        lambda: tileaot.per_channel_cast_fp8(X),
        [(F8, (8, 256)), (F32, (1, 256))],
    ),
    (
        "cast_back-g128",
        lambda: quant.cast_back((Q8, S_G128), "bf16", (1, 128)),
        lambda: tileaot.cast_back(Q8, S_G128, layout="g128"),
        [(BF16, (8, 256))],
    ),
    (
        "cast_back-token-colmajor-sf",
        lambda: quant.cast_back((Q8, S_TOK.T.contiguous().T), "fp32", (1, 256)),
        lambda: tileaot.cast_back(Q8, S_TOK, layout="token", out_dtype=F32),
        [(F32, (8, 256))],
    ),
    (
        "cast_back-block",
        lambda: quant.cast_back((Q8, S_BLOCK), "bf16", [128, 128]),
        lambda: tileaot.cast_back(Q8, S_BLOCK, layout="block128"),
        [(BF16, (8, 256))],
    ),
    (
        "cast_back-e2m1",
        lambda: quant.cast_back((Q4.view(torch.int8), S4), "fp32", (1, 32)),
        lambda: tileaot.cast_back(Q4, E4, group_size=32, out_dtype=F32),
        [(F32, (8, 256))],
    ),
    (
        "cast_back-e5m6-row",
        lambda: quant.cast_back((QE, S_TOK.T.contiguous().T), "fp32", (1, 256), "e5m6"),
        lambda: tileaot.cast_back_e5m6(QE, S_TOK, out_dtype=F32),
        [(F32, (8, 256))],
    ),
    (
        "per_token_cast_back-e5m6-g64",
        lambda: quant.per_token_cast_back((QE, SE_G), "bf16", 64, "e5m6"),
        lambda: tileaot.cast_back_e5m6(QE, SE_G),
        [(BF16, (8, 256))],
    ),
    (
        "cast_back-e5m6-packed-ue8m0",
        lambda: quant.cast_back((QE, SE_UE8M0), "bf16", (1, 256), "e5m6"),
        lambda: tileaot.cast_back_e5m6(QE, served.ue8m0_to_float(SE_UE8M0)),
        [(BF16, (8, 256))],
    ),
    (
        "per_token_cast_back",
        lambda: quant.per_token_cast_back((Q8, S_G128), "bf16", 128),
        lambda: tileaot.cast_back(Q8, S_G128, layout="g128"),
        [(BF16, (8, 256))],
    ),
    (
        "swiglu_forward_and_per_token_cast",
        lambda: quant.swiglu_forward_and_per_token_cast(GATE, "e4m3", 128, swiglu_clamp_value=7.0),
        lambda: tileaot.swiglu_per_token_cast_fp8(GATE, None, 7.0),
        [(F8, (8, 256)), (F32, (8, 2))],
    ),
    (
        "swiglu_forward_and_per_token_cast-weighted",
        lambda: quant.swiglu_forward_and_per_token_cast(
            GATE, "e4m3", 128, PTT, TOPK_W, round_sf=True
        ),
        lambda: tileaot.swiglu_per_token_cast_fp8(GATE, ROW_W, round_sf=True),
        [(F8, (8, 256)), (F32, (8, 2))],
    ),
    (
        "swiglu_forward_and_per_token_cast-packed-col-major",
        lambda: quant.swiglu_forward_and_per_token_cast(
            GATE, "e4m3", 128, use_tma_aligned_col_major_sf=True, use_packed_ue8m0=True
        ),
        lambda: tileaot.swiglu_per_token_cast_fp8(GATE, None, None),
        [(F8, (8, 256)), (I32, (8, 1))],
    ),
    (
        "torch.swiglu_forward",
        lambda: compat.torch.swiglu_forward(X),
        lambda: tileaot.swiglu(X.float()),
        [(F32, (8, 128))],
    ),
    (
        "torch.swiglu_forward-weighted-clamped",
        lambda: compat.torch.swiglu.swiglu_forward(X32, PTT, TOPK_W, 0.5),
        lambda: tileaot.swiglu(
            torch.cat([X32[:, :128].clamp(max=0.5), X32[:, 128:].clamp(-0.5, 0.5)], 1)
        ),
        [(F32, (8, 128))],
    ),
    (
        "torch.swiglu_backward",
        lambda: compat.torch.swiglu_backward((Q8, S_G128), *BWD[2:], 128, 10.0),
        lambda: tileaot.swiglu_backward(*BWD, 10.0),
        [(F32, (8, 128)), (F32, (8, 256)), (F32, (4, 2))],
    ),
    (
        "swiglu_backward_and_per_token_cast",
        lambda: _unnest(
            quant.swiglu_backward_and_per_token_cast((Q8, S_G128), *BWD[2:], 128, True)
        ),
        lambda: tileaot.per_token_cast_fp8(tileaot.swiglu_backward(*BWD)[1], 128, round_sf=True),
        [(BF16, (8, 128)), (F8, (8, 256)), (F32, (8, 2)), (BF16, (8, 256)), (F32, (4, 2))],
    ),
    (
        "top2_sum_gate",
        lambda: moe.top2_sum_gate(LOGITS, BIAS, 6, 4, 8, False, 1, 2.5, 3, 4, 1, 2, "sigmoid"),
        lambda: tileaot.top2_sum_gate(LOGITS, BIAS, 6, 8, 4, 2.5, 0, 4, 1, 2, "sigmoid"),
        [(torch.int64, (8, 6)), (F32, (8, 6))],
    ),
    (
        "top2_sum_gate-shared",
        lambda: moe.top2_sum_gate(LOGITS, BIAS, 6, 4, 8, True, 2, 1.0, 0, 1, 0, 1, "sigmoid"),
        lambda: tileaot.top2_sum_gate(LOGITS, BIAS, 6, 8, 4, 1.0, 2),
        [(torch.int64, (8, 8)), (F32, (8, 8))],
    ),
    (
        "topk_gate",
        lambda: moe.topk_gate(LOGITS, 8),
        lambda: tileaot.topk_gate(LOGITS, 8),
        [(torch.int64, (8, 8))],
    ),
    (
        "reduce_fused",
        lambda: moe.reduce_fused(Y, TOPK_W.repeat(2, 1), POS),
        lambda: tileaot.moe_reduce(Y, POS, TOPK_W.repeat(2, 1)),
        [(BF16, (8, 256))],
    ),
    (
        "reduce_fused-unweighted-fp32-out",
        lambda: moe.reduce_fused(Y, None, POS, out=OUT32),
        lambda: tileaot.moe_reduce(Y, POS, None, out=OUT32),
        [(F32, (8, 256))],
    ),
    (
        "transpose",
        lambda: compat.transpose.transpose(X),
        lambda: tileaot.transpose(X),
        [(BF16, (256, 8))],
    ),
    (
        "batched_transpose",
        lambda: compat.transpose.batched_transpose(SINK),
        lambda: tileaot.transpose(SINK),
        [(F32, (3, 4, 4))],
    ),
    (
        "topk_sum_and_topk_group_idx",
        lambda: moe.topk_sum_and_topk_group_idx(GROUPED, 2, 4),
        lambda: tileaot.topk_sum_and_topk_group_idx(GROUPED, 2, 4),
        [(torch.int64, (8, 4))],
    ),
    (
        "normalize_weight",
        lambda: moe.normalize_weight(TOPK_W),
        lambda: tileaot.normalize_weight(TOPK_W),
        [(F32, (4,)), (F32, (4, 2))],
    ),
    (
        "mask_indices_by_tp-int32",
        lambda: moe.mask_indices_by_tp(IDX32, 64, 4, 1, 2),
        lambda: tileaot.mask_indices_by_tp(IDX32, 64, 4, 1, 2),
        [(I32, (8, 6))],
    ),
    (
        "mask_indices_by_tp-int64",
        lambda: moe.mask_indices_by_tp(IDX64, 64, 4, 1, 2),
        lambda: tileaot.mask_indices_by_tp(IDX32, 64, 4, 1, 2),
        [(torch.int64, (8, 6))],
    ),
    (
        "expand_to_fused",
        lambda: moe.expand_to_fused(HID2, FUSED_POS, FUSED_PTE),
        lambda: tileaot.expand_to_fused(HID2, FUSED_POS, FUSED_PTE),
        [(BF16, (40, 256))],
    ),
    (
        "expand_to_fused_with_sf",
        lambda: moe.expand_to_fused_with_sf((Q_FUSED, SF_FUSED), 128, FUSED_POS, FUSED_PTE),
        lambda: tileaot.expand_to_fused_with_sf(Q_FUSED, SF_FUSED, FUSED_POS, FUSED_PTE),
        [(F8, (40, 256)), (F32, (40, 2))],
    ),
    (
        "expand_to_fused_with_sf-uint8-packed-col-major",
        lambda: moe.expand_to_fused_with_sf(
            (Q_FUSED.view(torch.uint8), SF_PACKED), 128, FUSED_POS, FUSED_PTE, True
        ),
        lambda: tileaot.expand_to_fused_with_sf(
            Q_FUSED, SF_PACKED, FUSED_POS, FUSED_PTE, use_tma_aligned_col_major_sf=True
        ),
        [(torch.uint8, (40, 256)), (I32, (40, 1))],
    ),
    (
        "group_count-int64",
        lambda: moe.group_count(IDX64, 64),
        lambda: tileaot.group_count(IDX32, 64),
        [(I32, (64,))],
    ),
    (
        "aux_fi-int64",
        lambda: moe.aux_fi(IDX64, 64, 6),
        lambda: tileaot.aux_fi(IDX32, 64, 6),
        [(F32, (64,))],
    ),
    (
        "inplace_unique_group_indices-int32",  # in place: the case returns the tensor it gave
        lambda: (moe.inplace_unique_group_indices(x := IDX32.clone(), 64), x)[1],
        lambda: tileaot.inplace_unique_group_indices(IDX32, 64),
        [(I32, (8, 6))],
    ),
    (
        "inplace_unique_group_indices-int64",
        lambda: (moe.inplace_unique_group_indices(x := IDX64.clone(), 64), x)[1],
        lambda: tileaot.inplace_unique_group_indices(IDX32, 64),
        [(torch.int64, (8, 6))],
    ),
    (
        "expand_to_mhc",
        lambda: ops.expand_to_mhc(HID, 4),
        lambda: tileaot.expand_to_mhc(HID, 4),
        [(BF16, (2, 3, 4, 256))],
    ),
    (
        "mhc_pre_apply_mix",
        lambda: ops.mhc_pre_apply_mix(RES, MIX),
        lambda: tileaot.mhc_pre_apply_mix(RES, MIX),
        [(BF16, (2, 3, 256))],
    ),
    (
        "mhc_post",
        lambda: ops.mhc_post(HID, RES, MIX, COMB),
        lambda: tileaot.mhc_post(HID, RES, MIX, COMB),
        [(BF16, (2, 3, 4, 256))],
    ),
    (
        "engram_gate",
        lambda: compat.modeling.engram.engram_gate(ENG_H, ENG_K, ENG_V, ENG_W, ENG_W, 0.5, 1e-5),
        lambda: tileaot.engram_gate(ENG_H, ENG_K, ENG_V[:, None], ENG_W, ENG_W, 1e-5, 0.5),
        [(BF16, (2, 4, 256))],
    ),
    (
        "engram_hash",
        lambda: compat.engram.engram_hash(HASH_IDS, HASH_MULT, HASH_SIZES, HASH_OFFSETS),
        lambda: tileaot.engram_hash(HASH_IDS, HASH_MULT, HASH_SIZES, HASH_OFFSETS),
        [(I32, (2, 9, 16))],
    ),
    (
        "fused_weight",
        lambda: compat.engram.fused_weight(ENG_W, ENG_W),
        lambda: tileaot.engram_fused_weight(ENG_W, ENG_W),
        [(F32, (4, 256))],
    ),
    (
        "grad_w_reduce",  # in place: the gradients it updated
        lambda: (compat.engram.grad_w_reduce(GWR_P, ENG_W, ENG_W, *(g := GWR_ACC())), *g)[1:],
        lambda: tileaot.engram_grad_w_reduce(GWR_P, ENG_W, ENG_W, *GWR_ACC()),
        [(F32, (4, 256))] * 2,
    ),
    (
        "sinkhorn_normalize",
        lambda: ops.sinkhorn_normalize(SINK.transpose(1, 2), 20, 1e-5),
        lambda: tileaot.sinkhorn_normalize(SINK.transpose(1, 2).contiguous(), 20, 1e-5),
        [(F32, (3, 4, 4))],
    ),
    (
        "mhc_pre_norm_fn",
        lambda: ops.mhc_pre_norm_fn(RES, NORM_FN, None, 1e-6, False, 4),
        lambda: tileaot.mhc_pre_norm_fn(RES, NORM_FN, None, 1e-6),
        [(F32, (2, 3, 24))],
    ),
    (
        "mhc_pre_split_mixes",
        lambda: ops.mhc_pre_split_mixes(SPLIT_X, SPLIT_SCALE, SPLIT_BASE, 4, 2.0, 1e-6),
        lambda: tileaot.mhc_pre_split_mixes(SPLIT_X, SPLIT_SCALE, SPLIT_BASE, 4, 2.0, 1e-6),
        [(F32, (2, 3, 4, 1)), (F32, (2, 3, 4, 1)), (F32, (2, 3, 4, 4))],
    ),
    (
        "mhc_head_compute_mix",
        lambda: ops.mhc_head_compute_mix(HEAD_X, HEAD_SCALE, HEAD_BASE, 1e-6),
        lambda: tileaot.mhc_head_compute_mix(HEAD_X, HEAD_SCALE, HEAD_BASE, 1e-6),
        [(F32, (2, 3, 4))],
    ),
]


@pytest.mark.parametrize(
    ("compat_call", "direct_call", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_call_reaches_the_op(fake, cpu_as_cuda, compat_call, direct_call, want):
    result, lookups, launches = _record(fake, compat_call)
    _, direct_lookups, direct_launches = _record(fake, direct_call)
    assert launches, "nothing was launched"
    assert (lookups, launches) == (direct_lookups, direct_launches)
    got = [(r.dtype, tuple(r.shape)) for r in _flat(result)]
    assert got == want


def test_row_weights_are_tilekernels_reference_weights():
    """The per-row weight gathered for the SwiGLU cast is what TileKernels' reference
    multiplies each row by (``swiglu_forward`` with pos_to_token_topk, -1 rows included)."""
    swiglu_forward = tk("swiglu").swiglu_forward
    x = t(8, 256, dtype=F32)
    w_rows = served.row_weights("f", PTT, TOPK_W)
    ours = swiglu_forward(x) * w_rows[:, None]
    assert torch.equal(ours, swiglu_forward(x, PTT, TOPK_W))


def test_fp4_scales_are_tilekernels_float_scales():
    """Our UE8M0 bytes decode to TileKernels' float32 e2m1 scales bit for bit (and back)."""
    from kernels_py.quant import per_token_cast_fp4 as fp4

    x = t(129, 640)
    x[3] = 0.0  # all-zero groups: byte 1, 2**-126
    x[5, :32] *= 1e30
    _, e = fp4.reference(x, 32, "ue8m0")
    _, s_tk = tk("cast").cast(x, "e2m1", (1, 32), round_sf=True)
    assert torch.equal(served.ue8m0_to_float(e).view(I32), s_tk.view(I32))
    assert torch.equal(served.float_to_ue8m0("f", s_tk), e)
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    decoded = served.ue8m0_to_float(every)
    assert decoded[0] == 0 and decoded[255] == float("inf")
    assert torch.equal(decoded[1:255], torch.exp2(torch.arange(1, 255.0) - 127))


def test_e2m1_cast_back_refuses_scales_that_are_no_power_of_two(fake, cpu_as_cuda):
    for bad in (1.5, -2.0, -0.0):
        sf = S4.clone()
        sf[2, 3] = bad
        with pytest.raises(
            ValueError, match=r"^tileaot\.tile_kernels\.cast_back: e2m1 scales must"
        ):
            quant.cast_back((Q4.view(torch.int8), sf), "bf16", (1, 32))
    assert not fake.launches


# --- (d) TileKernels' results, on the CPU: our references stand in for the kernels --------------
# Our GPU tests hold each kernel to its reference bit for bit; here the compat functions run on
# those references and meet TileKernels' torch references (tests/test_gpu_tile_kernels_compat.py
# repeats this on the GPU with the kernels).


def _stand_ins() -> dict:
    from kernels_py.act import swiglu as sw
    from kernels_py.act import swiglu_backward as swb
    from kernels_py.act import swiglu_per_channel_cast_and_transpose as spct
    from kernels_py.act import swiglu_per_token_cast_fp8 as swq
    from kernels_py.engram import engram_fused_weight as efw
    from kernels_py.engram import engram_gate as eg
    from kernels_py.engram import engram_grad_w_reduce as egw
    from kernels_py.engram import engram_hash as eh
    from kernels_py.mhc import expand_to_mhc as ex
    from kernels_py.mhc import mhc_head_compute_mix as hcm
    from kernels_py.mhc import mhc_post as mp
    from kernels_py.mhc import mhc_pre_apply_mix as pam
    from kernels_py.mhc import mhc_pre_split_mixes as psm
    from kernels_py.mhc import sinkhorn_normalize as sk
    from kernels_py.moe import aux_fi as af
    from kernels_py.moe import expand_to_fused as etf
    from kernels_py.moe import expand_to_fused_with_sf as etfs
    from kernels_py.moe import group_count as gc
    from kernels_py.moe import inplace_unique_group_indices as ug
    from kernels_py.moe import mask_indices_by_tp as mi
    from kernels_py.moe import moe_reduce as mr
    from kernels_py.moe import normalize_weight as nw
    from kernels_py.moe import top2_sum_gate as t2
    from kernels_py.moe import topk_gate as tg
    from kernels_py.moe import topk_sum_and_topk_group_idx as tsg
    from kernels_py.quant import cast_back_e5m6 as cbe
    from kernels_py.quant import cast_back_fp4 as cb4
    from kernels_py.quant import cast_back_fp8 as cb8
    from kernels_py.quant import per_block_cast_fp8 as pb
    from kernels_py.quant import per_channel_cast_and_transpose as pct
    from kernels_py.quant import per_channel_cast_fp8 as pc
    from kernels_py.quant import per_channel_cast_fused as pcf
    from kernels_py.quant import per_token_cast_e5m6 as e5
    from kernels_py.quant import per_token_cast_fp4 as fp4
    from kernels_py.quant import per_token_cast_fp8 as pt

    def cast_back(q, scale, *, layout=None, group_size=None, out_dtype=None):
        if q.dtype == torch.uint8:
            return cb4.reference(q, scale, group_size, out_dtype)
        return cb8.reference(q, scale, layout, out_dtype)

    def moe_reduce(y, pos, weights=None, out_dtype=None, *, out=None):
        if out is None:
            return mr.reference(y, pos, weights, out_dtype)
        return out.copy_(mr.reference(y, pos, weights, out.dtype))

    return {
        "per_token_cast_fp8": lambda x, g=128, *, round_sf=False: pt.reference(x, g, round_sf),
        "per_block_cast_fp8": lambda x, *, round_sf=False: pb.reference(x, round_sf),
        "per_channel_cast_fp8": lambda x, *, round_sf=False: pc.reference(x, round_sf),
        "per_channel_cast_and_transpose": lambda x, g=128, *, round_sf=False: pct.reference(
            x, g, round_sf
        ),
        "per_channel_cast_fused": _channel_fused(pcf.reference),
        "per_token_cast_fp4": fp4.reference,
        "per_token_cast_e5m6": lambda x, *, round_sf=False: e5.reference(x, round_sf),
        "cast_back": cast_back,
        "cast_back_e5m6": lambda q, scale, *, out_dtype=None: cbe.reference(q, scale, out_dtype),
        "swiglu_per_token_cast_fp8": swq.reference,
        "swiglu_per_channel_cast_and_transpose": lambda x, g=128, clamp=None, *, round_sf=False: (
            spct.reference(x, g, clamp, round_sf)
        ),
        "swiglu": _no_out(sw.reference),
        "swiglu_backward": lambda *args, out_dtype=None: swb.reference(*args, out_dtype=out_dtype),
        "top2_sum_gate": lambda *args: t2.reference(*args[:10]),  # scoring_func: sigmoid only
        "topk_gate": tg.reference,
        "moe_reduce": moe_reduce,
        "transpose": lambda x: x.transpose(-1, -2).contiguous(),
        "sinkhorn_normalize": sk.reference,
        # the ops' own out= is never passed by the compat functions here (out=None)
        "topk_sum_and_topk_group_idx": _no_out(tsg.reference),
        "normalize_weight": _no_out(nw.reference),
        "mask_indices_by_tp": _no_out(mi.reference),
        "expand_to_fused": _no_out(etf.reference),
        "expand_to_fused_with_sf": _with_sf(etfs.reference),
        "group_count": _no_out(gc.reference),
        "aux_fi": _no_out(af.reference),
        "inplace_unique_group_indices": _no_out(ug.reference),
        "expand_to_mhc": _no_out(ex.reference),
        "mhc_pre_apply_mix": _no_out(pam.reference),
        "mhc_post": _no_out(mp.reference),
        "engram_gate": lambda *args: eg.reference(*args)[0],
        "engram_hash": _no_out(eh.reference),
        "engram_fused_weight": _no_out(efw.reference),
        "engram_grad_w_reduce": _no_out(egw.reference),
        "mhc_pre_norm_fn": _weighted_norm_fn,
        "mhc_pre_split_mixes": _no_out(psm.reference),
        "mhc_head_compute_mix": _no_out(hcm.reference),
    }


def _weighted_norm_fn(residual, mhc_fn, mhc_norm_weight=None, mhc_norm_eps=1e-6, *, out=None):
    """tileaot.mhc_pre_norm_fn on its kernel's reference (the weight multiplied first)."""
    from kernels_py.mhc import mhc_pre_norm_fn as pnf

    assert out is None
    fn = mhc_fn if mhc_norm_weight is None else mhc_fn * mhc_norm_weight
    return pnf.reference(residual, fn, mhc_norm_eps)


def _channel_fused(reference):
    def call(x, pos_to_token, *, x_sf=None, round_sf=False, out=None):
        assert out is None
        return reference(x, pos_to_token, x_sf, round_sf)

    return call


def _with_sf(reference):
    def call(*args, use_tma_aligned_col_major_sf=False, out=None):
        assert out is None
        return reference(*args, "col" if use_tma_aligned_col_major_sf else "row")

    return call


def _no_out(reference):
    def call(*args, out=None):
        assert out is None
        return reference(*args)

    return call


@pytest.fixture
def references(monkeypatch):
    for name, fn in _stand_ins().items():
        monkeypatch.setattr(tileaot, name, fn)
    rf = tk("reduce_fused")  # its CPU compile is no FMA: test_parity_moe.py says why
    fma_f32 = importlib.import_module("kernels_py.moe.moe_reduce").fma_f32
    monkeypatch.setattr(rf, "elementwise_fma", fma_f32)
    # swiglu_backward's too: a scalar c (on CUDA its compile is one fma, as TileKernels' fused
    # kernel, which its test compares with it exactly)
    monkeypatch.setattr(
        tk("swiglu"), "elementwise_fma", lambda a, b, c: fma_f32(a, b, torch.full_like(a, c))
    )


def _swiglu_channel_cast(x, group, round_sf, without_transpose, clamp):
    """TileKernels' swiglu_forward_and_per_channel_cast_and_transpose from its references:
    swiglu_forward rounded to bf16 (its kernel's shared tile), the (G, 1) cast, transposed
    unless ``without_transpose``."""
    a = tk("swiglu").swiglu_forward(x, swiglu_clamp_value=clamp).bfloat16()
    q, sf = tk("cast").cast(a, "e4m3", (group, 1), round_sf=round_sf)
    return (q if without_transpose else q.T.contiguous()), sf


def _transposed(cast: tuple) -> tuple:
    """TileKernels' per_channel_cast_and_transpose from its reference's (G, 1) cast: the
    codes transposed (what its kernel writes), the scales as they are."""
    return cast[0].T.contiguous(), cast[1]


def _edgy(m: int, n: int, dtype=BF16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g) * 3
    x[::5] *= 1e4
    x[2::7] = 0.0
    x[0, ::3] = -0.0
    return x.to(dtype)


def _with_sf_inputs(x: torch.Tensor, g: torch.Generator) -> list[tuple]:
    """(name, (data, sf), num_per_channels, column-major) of TileKernels' three scale layouts
    of expand_to_fused_with_sf, from e4m3 casts of `x` [T, 512]."""
    cast = tk("cast").cast
    words = torch.randint(-(2**31), 2**31 - 1, (x.shape[0], 1), generator=g, dtype=I32)
    return [
        ("g128", cast(x, "e4m3", (1, 128)), 128, False),
        ("g32-col-major", cast(x, "e4m3", (1, 32), round_sf=True), 32, True),
        ("packed-col-major", (cast(x, "e4m3", (1, 128))[0], words), 128, True),
    ]


def _tk_cases():
    cast, topk = tk("cast"), tk("topk")
    x, x32, gate = _edgy(129, 512), _edgy(7, 256, F32, 1), _edgy(129, 512, seed=2)
    xt = _edgy(256, 192, seed=10)  # per_channel_cast_and_transpose: tokens a multiple of 128
    q8, qb = cast.cast(x, "e4m3", (1, 128)), cast.cast(x, "e4m3", (128, 128), round_sf=True)
    q8t = cast.cast(x32, "e4m3", (1, 256))
    q4 = cast.cast(x, "e2m1", (1, 32), round_sf=True)
    g = torch.Generator().manual_seed(3)
    w = torch.rand(40, 4, generator=g)
    ptt = torch.randperm(160, generator=g)[:129].int()
    ptt[::6] = -1
    logits = _edgy(129, 256, F32, 4)
    bias = torch.randn(256, generator=g) * 0.1
    ties = _edgy(129, 72, F32, 5).round()
    y = _edgy(1000, 256, seed=6)
    pos = torch.randperm(1000, generator=g)[:1000].view(125, 8).int()
    pos[::3, 7] = -1
    rw = torch.rand(125, 8, generator=g)
    sink = torch.randn(9, 4, 4, generator=g)
    grouped = _edgy(129, 64, F32, 7).round().view(129, 8, 8)  # rounded: tied sums
    idx = torch.randint(-1, 256, (129, 8), generator=g)  # int64, as TileKernels' routers
    groups = torch.randint(-1, 8, (129, 4), generator=g)
    groups[5] = -5
    hidden = _edgy(6, 512, seed=9).view(2, 3, 512)
    router = (logits, bias, 8, 4, 8, True, 1, 2.5, 1, 4, 1, 2, "sigmoid")
    ngrams = torch.randint(0, 2**31 - 1, (129, 4), generator=g, dtype=I32)
    mult = torch.randint(-(2**62), 2**62, (3, 4), generator=g)  # int64 products wrap
    sizes = torch.randint(1, 2**31 - 1, (3, 3, 5), generator=g, dtype=I32)
    hashed = (ngrams, mult, sizes, tk("engram").make_offsets(sizes))  # offsets wrap in int32
    eng_w = (_edgy(4, 512, seed=12), _edgy(4, 512, seed=13))  # 1e4 rows, zeros, -0.0
    cpos, cpos7 = (
        torch.randint(-1, 129, (160,), generator=g),
        torch.randint(-1, 7, (48,), generator=g),
    )
    cpos, cpos7 = cpos.int(), cpos7.int()  # per_channel_cast_fused's gathers (-1: zero rows)
    pcf = tk("per_channel_cast_fused").per_channel_cast_fused
    from _fused_mapping import fused_mapping

    fused_pte, fused_pos = fused_mapping(idx, 256, 16, 129 * 8 + 256 * 15 + 5)  # tail rows too
    e5m6 = [
        (
            f"per_token_cast-e5m6-{dt}-{flags}",
            lambda xe=xe, flags=flags: quant.per_token_cast(xe, "e5m6", 512, None, *flags),
            lambda xe=xe, flags=flags: tk("cast_e5m6").cast_to_e5m6(xe, 512, *flags),
        )
        for dt, xe in (("bf16", x), ("fp32", x.float()))
        for flags in itertools.product((False, True), repeat=3)
    ]
    e5m6_back = [
        (
            f"cast_back-e5m6-{fmt}-{flags}",
            lambda qs=qs, fmt=fmt: quant.cast_back(qs, fmt, (1, 512), "e5m6"),
            lambda qs=qs, fmt=fmt: tk("cast_e5m6").cast_back_from_e5m6(qs, fmt, (1, 512)),
        )
        for fmt in ("bf16", "fp32")
        for flags in ((False, False), (True, False), (True, True))  # round_sf, packed ue8m0
        for qs in [tk("cast_e5m6").cast_to_e5m6(x, 512, True, *flags)]  # col-major scales
    ]
    codes = torch.randint(0, 256, (129, 768), generator=g, dtype=torch.uint8)  # NaN, inf too
    group_sf = torch.rand(129, 8, generator=g) * 2.0 ** torch.randint(-40, 40, (129, 8))
    e5m6_back.append(
        (
            "per_token_cast_back-e5m6-g64-random-codes",
            lambda: quant.per_token_cast_back((codes, group_sf), "bf16", 64, "e5m6"),
            lambda: tk("cast_e5m6").cast_back_from_e5m6((codes, group_sf), "bf16", (1, 64)),
        )
    )
    split = (torch.randn(3, 5, 24, generator=g) * 4, torch.randn(3, generator=g))
    split += (torch.randn(24, generator=g),)
    head = (torch.randn(3, 5, 4, generator=g) * 4, torch.randn(1, generator=g))
    head += (torch.randn(4, generator=g),)
    return [
        *e5m6,
        *e5m6_back,
        (
            "per_token_cast-g128",
            lambda: quant.per_token_cast(x, "e4m3", 128, round_sf=True),
            lambda: cast.cast(x, "e4m3", (1, 128), round_sf=True),
        ),
        (
            "per_token_cast-g32",
            lambda: quant.per_token_cast(x, "e4m3", 32, round_sf=True),
            lambda: cast.cast(x, "e4m3", (1, 32), round_sf=True),
        ),
        (
            "per_token_cast-row",
            lambda: quant.per_token_cast(x32, "e4m3", 256),
            lambda: cast.cast(x32, "e4m3", (1, 256)),
        ),
        (
            "per_token_cast-e2m1-16",
            lambda: quant.per_token_cast(x, "e2m1", 16, round_sf=True),
            lambda: cast.cast(x, "e2m1", (1, 16), round_sf=True),
        ),
        (
            "per_block_cast",
            lambda: quant.per_block_cast(x, "e4m3", (128, 128)),
            lambda: cast.cast(x, "e4m3", (128, 128)),
        ),
        (
            "per_channel_cast",
            lambda: quant.per_channel_cast(x, "e4m3", 128, round_sf=True),
            lambda: cast.cast(x, "e4m3", (128, 1), round_sf=True),
        ),
        *(
            (
                f"swiglu_forward_and_per_channel_cast_and_transpose-g{g}-{clamp}-{flip}",
                lambda g=g, c=clamp, f=flip: (
                    quant.swiglu_forward_and_per_channel_cast_and_transpose(xt, "e4m3", g, f, f, c)
                ),
                lambda g=g, c=clamp, f=flip: _swiglu_channel_cast(xt, g, f, f, c),
            )
            for g in (32, 128)
            for clamp in (None, 0.5)
            for flip in (False, True)  # round_sf and without_transpose
        ),
        *(
            (
                f"per_channel_cast_and_transpose-g{g}-{round_sf}",
                lambda g=g, r=round_sf: quant.per_channel_cast_and_transpose(xt, "e4m3", g, r),
                lambda g=g, r=round_sf: _transposed(cast.cast(xt, "e4m3", (g, 1), round_sf=r)),
            )
            for g in (32, 128)
            for round_sf in (False, True)
        ),
        (
            "per_channel_cast_fused-gather-bf16",
            lambda: quant.per_channel_cast_fused(x, "e4m3", 128, True, None, cpos),
            lambda: pcf(x, 128, None, True, cpos),
        ),
        (
            "per_channel_cast_fused-gather-fp32",
            lambda: quant.per_channel_cast_fused(x32, "e4m3", 128, pos_to_token=cpos7),
            lambda: pcf(x32, 128, None, False, cpos7),
        ),
        (
            "per_channel_cast_fused-fp8",
            lambda: quant.per_channel_cast_fused(q8, "e4m3", 128, False, 128, cpos),
            lambda: pcf(q8, 128, 128, False, cpos),
        ),
        (
            "per_channel_cast_fused-fp8-no-index",
            lambda: quant.per_channel_cast_fused(q8, "e4m3", 128, True, 128),
            lambda: pcf(q8, 128, 128, True, None),
        ),
        (
            "per_channel_cast_fused-plain",
            lambda: quant.per_channel_cast_fused(x, "e4m3", 128),
            lambda: pcf(x, 128, None, False, None),
        ),
        (
            "cast_back-g128",
            lambda: quant.cast_back(q8, "fp32", (1, 128)),
            lambda: cast.cast_back(q8, "fp32", (1, 128)),
        ),
        (
            "per_token_cast_back-row",
            lambda: quant.per_token_cast_back(q8t, "bf16", 256),
            lambda: cast.cast_back(q8t, "bf16", (1, 256)),
        ),
        (
            "cast_back-block",
            lambda: quant.cast_back(qb, "bf16", (128, 128)),
            lambda: cast.cast_back(qb, "bf16", (128, 128)),
        ),
        (
            "cast_back-e2m1",
            lambda: quant.cast_back(q4, "bf16", (1, 32)),
            lambda: cast.cast_back(q4, "bf16", (1, 32)),
        ),
        (
            "swiglu-weighted-clamped",
            lambda: quant.swiglu_forward_and_per_token_cast(
                gate, "e4m3", 128, ptt, w, round_sf=True, swiglu_clamp_value=0.5
            ),
            lambda: cast.cast(
                tk("swiglu").swiglu_forward(gate, ptt, w, 0.5), "e4m3", (1, 128), round_sf=True
            ),
        ),
        (
            "torch.swiglu_forward",
            lambda: compat.torch.swiglu_forward(gate),
            lambda: tk("swiglu").swiglu_forward(gate),
        ),
        (
            "torch.swiglu_forward-weighted-clamped-counted",
            lambda: (
                compat.torch.swiglu_forward(gate, ptt, w, 0.5, c := torch.zeros(3).long()),
                c,
            ),
            lambda: (tk("swiglu").swiglu_forward(gate, ptt, w, 0.5, d := torch.zeros(3).long()), d),
        ),
        (
            "top2_sum_gate-indices",
            lambda: moe.top2_sum_gate(*router)[0],
            lambda: topk.top2_sum_gate(*router)[0],
        ),
        ("topk_gate-ties", lambda: moe.topk_gate(ties, 8), lambda: topk.stable_topk(ties, 8)),
        (
            "reduce_fused",
            lambda: moe.reduce_fused(y, rw, pos),
            lambda: tk("reduce_fused").reduce_fused(y, rw, pos),
        ),
        (
            "batched_transpose",
            lambda: compat.transpose.batched_transpose(sink),
            lambda: sink.transpose(1, 2).contiguous(),
        ),
        (
            "topk_sum_and_topk_group_idx-ties",
            lambda: moe.topk_sum_and_topk_group_idx(grouped, 2, 4),
            lambda: topk.topk_sum_and_topk_group_idx(grouped, 2, 4),
        ),
        (
            "normalize_weight",
            lambda: moe.normalize_weight(rw),
            lambda: tk("moe").normalize_weight(rw),
        ),
        (
            "mask_indices_by_tp-int64",
            lambda: moe.mask_indices_by_tp(idx, 256, 8, 1, 2),
            lambda: tk("moe").mask_indices_by_tp(idx, 256, 8, 1, 2),
        ),
        (
            "expand_to_fused",
            lambda: moe.expand_to_fused(x, fused_pos, fused_pte),
            lambda: tk("expand_to_fused").expand_to_fused(x, fused_pos, fused_pte),
        ),
        *(
            (
                f"expand_to_fused_with_sf-{name}",
                lambda qs=qs, n=n, col=col: moe.expand_to_fused_with_sf(
                    qs, n, fused_pos, fused_pte, col
                ),
                lambda qs=qs, n=n, col=col: tk("expand_to_fused").expand_to_fused_with_sf(
                    qs, n, fused_pos, fused_pte, col
                ),
            )
            for name, qs, n, col in _with_sf_inputs(x, g)
        ),
        (
            "group_count-int64",
            lambda: moe.group_count(idx, 256),
            lambda: tk("moe").group_count(idx, 256),
        ),
        (
            "aux_fi-int64",
            lambda: moe.aux_fi(idx, 256, 8),
            lambda: tk("moe").aux_fi(idx, 256, 8),
        ),
        (
            "inplace_unique_group_indices-int64",  # repeats, -1s and a repeated -5
            lambda: (moe.inplace_unique_group_indices(a := groups.clone(), 8), a)[1],
            lambda: (tk("moe").inplace_unique_group_indices(b := groups.clone(), 8), b)[1],
        ),
        (
            "inplace_unique_group_indices-int32",
            lambda: (moe.inplace_unique_group_indices(a := groups.int(), 8), a)[1],
            lambda: (tk("moe").inplace_unique_group_indices(b := groups.int(), 8), b)[1],
        ),
        (
            "expand_to_mhc",
            lambda: ops.expand_to_mhc(hidden, 4),
            lambda: tk("mhc").expand_to_mhc_ref(hidden, 4),
        ),
        (
            "engram_hash",
            lambda: compat.engram.engram_hash(*hashed),
            lambda: tk("engram").engram_hash_ref(*hashed),
        ),
        (
            "fused_weight",  # TileKernels' kernel: the product in float32 (exact for bf16)
            lambda: compat.engram.fused_weight(*eng_w),
            lambda: eng_w[0].float() * eng_w[1].float(),
        ),
        (
            "mhc_pre_split_mixes",
            lambda: ops.mhc_pre_split_mixes(*split, 4, 2.0, 1e-6),
            lambda: tk("mhc").mhc_pre_split_mixes_ref(*split, 4, 2.0, 1e-6),
        ),
        (
            "mhc_head_compute_mix",
            lambda: ops.mhc_head_compute_mix(*head, 1e-6),
            lambda: tk("mhc").mhc_head_compute_mix_ref(*head, 1e-6),
        ),
    ]


N_TK_CASES = 73  # (parametrized by index: the cases need TileKernels, imported lazily)


@pytest.mark.parametrize("index", range(N_TK_CASES))
def test_result_is_tilekernels(references, index):
    """Bit-exact where TileKernels' tests compare exactly (and ours are: README)."""
    cases = _tk_cases()
    assert len(cases) == N_TK_CASES
    name, ours, theirs = cases[index]
    for a, b in zip(_flat(ours()), _flat(theirs()), strict=True):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), name
        # flatten: a column-major [M, 1] view (e5m6 scales) counts as contiguous, stride 1 not
        a, b = (v.contiguous().flatten().view(torch.uint8) for v in (a, b))
        assert torch.equal(a, b), name


@pytest.mark.parametrize("flags", list(itertools.product((False, True), repeat=3)))
def test_e5m6_scale_layout_is_tilekernels(references, flags):
    """The scales' strides too (TileKernels' assert_equal compares them): column-major views
    of a buffer padded to 4 tokens."""
    x = _edgy(7, 64)
    _, sf = quant.per_token_cast(x, "e5m6", 64, None, *flags)
    _, want = tk("cast_e5m6").cast_to_e5m6(x, 64, *flags)
    assert (sf.dtype, sf.shape, sf.stride()) == (want.dtype, want.shape, want.stride())
    assert torch.equal(sf, want)


# TileKernels' column-major float32 and packed UE8M0 scale layouts: (col-major, packed)
SF_LAYOUTS = ((True, False), (True, True))


def _sf_layout_cases() -> list[tuple]:
    """(name, ours, theirs, (fmt, block, x shape)) of every cast with TileKernels' scale
    layouts: row counts (tokens, or 128-row blocks) and group counts no multiple of 4 (and
    one group a row), and no rows at all."""
    cast, swiglu_forward = tk("cast").cast, tk("swiglu").swiglu_forward
    cases = []
    for m, (col, packed), round_sf in itertools.product((0, 1, 7, 129, 300), SF_LAYOUTS, (0, 1)):
        x = _edgy(m + 1, 640, seed=m)[:m]  # 5 groups of 128 (20 of 32, 40 of 16)
        gate = _edgy(m + 1, 2 * 640, seed=m + 1)[:m]
        kw = dict(round_sf=bool(round_sf), use_tma_aligned_col_major_sf=col)
        kw["use_packed_ue8m0"] = packed
        tag = f"m{m}-{'packed' if packed else 'col'}-round{round_sf}"
        if m in (0, 300):  # per_block_cast: 3 (or 0) rows of 5 blocks
            cases.append(
                (
                    f"per_block_cast-{tag}",
                    lambda x=x, a=kw: quant.per_block_cast(x, "e4m3", (128, 128), **a),
                    lambda x=x, a=kw: cast(x, "e4m3", (128, 128), **a),
                    ("e4m3", (128, 128), x.shape),
                )
            )
        if m == 300:
            continue
        groups = [("e4m3", 128), ("e4m3", 32), ("e4m3", 640)]
        groups += [("e2m1", 16), ("e2m1", 32)] * round_sf  # e2m1: power-of-two scales only
        cases += [
            (
                f"per_token_cast-{fmt}-{n}-{tag}",
                lambda x=x, f=fmt, n=n, a=kw: quant.per_token_cast(x, f, n, **a),
                lambda x=x, f=fmt, n=n, a=kw: cast(x, f, (1, n), **a),
                (fmt, (1, n), x.shape),
            )
            for fmt, n in groups
        ]
        cases.append(
            (
                f"swiglu_forward_and_per_token_cast-{tag}",
                lambda g=gate, a=kw: quant.swiglu_forward_and_per_token_cast(g, "e4m3", 128, **a),
                lambda g=gate, a=kw: cast(swiglu_forward(g), "e4m3", (1, 128), **a),
                ("e4m3", (1, 128), x.shape),
            )
        )
    return cases


N_SF_LAYOUT_CASES = 88


@pytest.mark.parametrize("index", range(N_SF_LAYOUT_CASES))
def test_sf_layout_is_tilekernels(references, index):
    """Codes and scales in TileKernels' layouts, bit for bit, strides and padding too."""
    cases = _sf_layout_cases()
    assert len(cases) == N_SF_LAYOUT_CASES
    name, ours, theirs, (fmt, block, shape) = cases[index]
    (q, sf), (q_tk, sf_tk) = ours(), theirs()
    assert (q.dtype, q.shape) == (q_tk.dtype, q_tk.shape), name
    assert torch.equal(q.view(torch.uint8), q_tk.view(torch.uint8)), name
    assert_sf_is_tilekernels(sf, sf_tk, (shape, fmt, block, True, sf.dtype == I32), name)


PACKED_ROW_MAJOR = [
    ("per_token_cast", lambda: quant.per_token_cast(X, "e4m3", 128, use_packed_ue8m0=True)),
    (
        "per_token_cast",
        lambda: quant.per_token_cast(X, "e2m1", 32, round_sf=True, use_packed_ue8m0=True),
    ),
    (
        "per_block_cast",
        lambda: quant.per_block_cast(X, "e4m3", (128, 128), use_packed_ue8m0=True),
    ),
    (
        "swiglu_forward_and_per_token_cast",
        lambda: quant.swiglu_forward_and_per_token_cast(GATE, "e4m3", 128, use_packed_ue8m0=True),
    ),
    (
        "per_block_cast_lossless",
        lambda: quant.per_block_cast_lossless(
            (Q4.view(torch.int8), S4), "e4m3", (1, 32), (128, 128), use_packed_ue8m0=True
        ),
    ),
]


@pytest.mark.parametrize(("func", "call"), PACKED_ROW_MAJOR, ids=[f for f, _ in PACKED_ROW_MAJOR])
def test_packed_sf_needs_col_major(fake, cpu_as_cuda, func, call):
    """TileKernels' kernels have no packed row-major layout: one line naming the fix, before
    anything is launched."""
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == (
        f"tileaot.tile_kernels.{func}: use_packed_ue8m0 needs use_tma_aligned_col_major_sf=True"
        " (TileKernels' packed UE8M0 scales are column-major)"
    )
    assert not fake.launches


def test_e5m6_strided_rows_are_tilekernels(references):
    x = _edgy(9, 1024)[:, :512]  # rows 1024 apart, as TileKernels' kernel reads them
    q, sf = quant.per_token_cast(x, "e5m6", 512, round_sf=True)
    q_tk, sf_tk = tk("cast_e5m6").cast_to_e5m6(x, 512, round_sf=True)
    assert torch.equal(q, q_tk) and torch.equal(sf, sf_tk)


@pytest.mark.parametrize("index", range(3))
def test_expand_to_fused_with_sf_scale_layout_is_tilekernels(references, index):
    """The scales' strides, and the zero-padded buffer behind the column-major view."""
    from _fused_mapping import fused_mapping

    g = torch.Generator().manual_seed(11)
    x = _edgy(33, 512)
    idx = torch.randint(-1, 16, (33, 4), generator=g)
    pte, pos = fused_mapping(idx, 16, 8, 33 * 4 + 16 * 7 + 3)
    _, qs, n, col = _with_sf_inputs(x, g)[index]
    _, sf = moe.expand_to_fused_with_sf(qs, n, pos, pte, col)
    _, want = tk("expand_to_fused").expand_to_fused_with_sf(qs, n, pos, pte, col)
    assert (sf.dtype, sf.shape, sf.stride()) == (want.dtype, want.shape, want.stride())
    size = (sf.shape[1], sf.stride(1)) if col else sf.shape
    full = [torch.as_strided(v, size, (size[1], 1)).view(I32) for v in (sf, want)]
    assert torch.equal(*full)


def test_expand_to_fused_with_sf_refuses_what_tilekernels_asserts(fake, cpu_as_cuda):
    with pytest.raises(ValueError, match=r"int32 \(packed UE8M0\) scales need use_tma"):
        moe.expand_to_fused_with_sf((Q_FUSED, SF_PACKED), 128, FUSED_POS, FUSED_PTE)
    with pytest.raises(ValueError, match=r"x\[1\] has shape \(5, 2\); .* must be \[5, 8\]"):
        moe.expand_to_fused_with_sf((Q_FUSED, SF_FUSED), 32, FUSED_POS, FUSED_PTE)
    assert fake.launches == []


def test_within_tilekernels_bounds(references):
    """top2_sum_gate's weights (`torch.allclose`, its test's bound) and sinkhorn
    (`assert_close` defaults, its test's)."""
    g = torch.Generator().manual_seed(8)
    logits, bias = torch.randn(129, 256, generator=g), torch.randn(256, generator=g)
    router = (logits, bias, 6, 3, 8, False, 0, 2.5, 0, 1, 0, 1, "sigmoid")
    assert torch.allclose(moe.top2_sum_gate(*router)[1], tk("topk").top2_sum_gate(*router)[1])
    x = torch.randn(7, 8, 8, generator=g)
    ref = tk("mhc").sinkhorn_normalize_ref
    torch.testing.assert_close(ops.sinkhorn_normalize(x, 20), ref(x, 20))


def test_swiglu_backward_within_tilekernels_bounds(references):
    """torch.swiglu_backward and quant.swiglu_backward_and_per_token_cast against TileKernels'
    reference on its test's kind of data (its own e4m3 cast of the expanded rows, a fused
    mapping with padding rows): out, x_grad and the cast bit-exact (its test's assert_equal),
    weight_grad within atol = rtol = 1e-4 (its test's)."""
    from _fused_mapping import fused_mapping

    g = torch.Generator().manual_seed(12)
    _, tk2p = fused_mapping(torch.randint(-1, 16, (40, 4), generator=g), 16, 16)
    rows = int(tk2p.max()) + 6
    p2tk = torch.full((rows,), -1, dtype=I32)
    live = tk2p.view(-1) >= 0
    p2tk[tk2p.view(-1)[live].long()] = torch.arange(160, dtype=I32)[live]
    go, w = _edgy(rows, 256, seed=13), torch.rand(40, 4, generator=g)
    ref, cast = tk("swiglu").swiglu_backward, tk("cast").cast
    for p, clamp in itertools.product((32, 128), (None, 10.0, 0.5)):
        x = cast(_edgy(rows, 512, seed=p), "e4m3", (1, p))
        ours = compat.torch.swiglu_backward(x, go, w, p2tk, tk2p, p, clamp)
        want = ref(x, go, w, p2tk, tk2p, p, clamp)
        assert torch.equal(ours[0], want[0]) and torch.equal(ours[1], want[1]), (p, clamp)
        torch.testing.assert_close(ours[2], want[2], atol=1e-4, rtol=1e-4)
        fused = quant.swiglu_backward_and_per_token_cast(x, go, w, p2tk, tk2p, p, True, clamp)
        q, sf = cast(want[1], "e4m3", (1, p), round_sf=True)
        assert torch.equal(fused[0], want[0].bfloat16()) and torch.equal(
            fused[2], want[1].bfloat16()
        )
        assert torch.equal(fused[1][0].view(torch.uint8), q.view(torch.uint8)), (p, clamp)
        assert torch.equal(fused[1][1], sf), (p, clamp)
        torch.testing.assert_close(fused[3], want[2], atol=1e-4, rtol=1e-4)


def test_mhc_mixes_within_tilekernels_bounds(references):
    """mhc_pre_apply_mix (atol 1e-2, rtol 1e-3) and mhc_post (`assert_close` defaults): its
    tests' bounds."""
    g = torch.Generator().manual_seed(10)
    res = torch.randn(3, 5, 4, 512, generator=g).bfloat16()
    x = torch.randn(3, 5, 512, generator=g).bfloat16()
    mix, comb = torch.rand(3, 5, 4, 1, generator=g), torch.rand(3, 5, 4, 4, generator=g)
    mhc = tk("mhc")
    want = mhc.mhc_pre_apply_mix_ref(res, mix)
    torch.testing.assert_close(ops.mhc_pre_apply_mix(res, mix), want, atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(ops.mhc_post(x, res, mix, comb), mhc.mhc_post_ref(x, res, mix, comb))


def test_grad_w_reduce_within_tilekernels_bound(references):
    """TileKernels' test of grad_w_reduce (calc_diff < 1e-10 against ``acc + partial.sum(0) *
    w``, in place; its data: randn partials of 132 blocks, hc_mult 4)."""
    from _tile_kernels import calc_diff

    g = torch.Generator().manual_seed(14)
    partial = torch.randn(132, 4, 2048, generator=g)
    w_h, w_k = (torch.randn(4, 2048, generator=g).to(BF16) for _ in "hk")
    acc_h, acc_k = (torch.randn(4, 2048, generator=g) for _ in "hk")
    gh, gk = acc_h.clone(), acc_k.clone()
    assert compat.engram.grad_w_reduce(partial, w_h, w_k, gh, gk) is None
    s = partial.sum(0)
    assert calc_diff(gh, acc_h + s * w_k.float()) < 1e-10
    assert calc_diff(gk, acc_k + s * w_h.float()) < 1e-10


def test_engram_gate_within_tilekernels_bound(references):
    """Per-branch weights, one value row per token, a clamp: `calc_diff < 2e-10` (its test's
    bound, TileKernels' `calc_diff`) against `engram_gate_ref`."""
    ref = tk("engram").engram_gate_ref
    calc_diff = importlib.import_module("tile_kernels.testing.numeric").calc_diff
    g = torch.Generator().manual_seed(11)
    h, k = (torch.randn(9, 4, 256, generator=g).bfloat16() for _ in range(2))
    v = torch.randn(9, 256, generator=g).bfloat16()
    w_h, w_k = (torch.rand(4, 256, generator=g).bfloat16() + 0.5 for _ in range(2))
    for clamp in (1e-6, 0.3):
        out = compat.modeling.engram.engram_gate(h, k, v, w_h, w_k, clamp, 1e-6)
        want = ref(h, k, v, w_h, w_k, clamp, 1e-6)
        assert out.dtype == want.dtype and out.shape == want.shape
        assert calc_diff(out, want) < 2e-10, clamp


# --- (c) options not served: one line, naming the argument -------------------------------------
# (call, "func: arg=value", the message's rest after "is not served yet")

NOT_SERVED = [
    (
        lambda: quant.per_token_cast(X, "e5m6", 128),
        "per_token_cast_to_e5m6: num_per_channels=128",
        " with fmt='e5m6' (served: 256)",
    ),
    (
        lambda: quant.per_token_cast(X, "e3m2", 128),
        "per_token_cast: fmt='e3m2'",
        " (served: 'e4m3', 'e2m1', 'e5m6')",
    ),
    (
        lambda: quant.per_token_cast(X, "e4m3", 16),
        "per_token_cast: num_per_channels=16",
        " (served: 32, 64, 128, hidden=256)",
    ),
    (
        lambda: quant.per_token_cast(X, "e4m3", 128, (1, 128)),
        "per_token_cast: x_block_size=(1, 128)",
        " (served: None)",
    ),
    (
        lambda: quant.per_token_cast(X, "e2m1", 32),
        "per_token_cast: round_sf=False",
        " with fmt='e2m1' (served: True)",
    ),
    (
        lambda: quant.per_token_cast(X, "e2m1", 128, round_sf=True),
        "per_token_cast: num_per_channels=128",
        " with fmt='e2m1' (served: 16, 32)",
    ),
    (
        lambda: quant.swiglu_forward_and_per_channel_cast_and_transpose(XT, "e4m3", 64),
        "swiglu_forward_and_per_channel_cast_and_transpose: num_per_tokens=64",
        " (served: 32, 128)",
    ),
    (
        lambda: quant.per_channel_cast_and_transpose(XT, "e4m3", 64),
        "per_channel_cast_and_transpose: num_per_tokens=64",
        " (served: 32, 128)",
    ),
    (
        lambda: quant.per_channel_cast_and_transpose(XT, "e5m6", 128),
        "per_channel_cast_and_transpose: fmt='e5m6'",
        " (served: 'e4m3')",
    ),
    (
        lambda: quant.per_channel_cast_fused(X, "e4m3", 64),
        "per_channel_cast_fused: num_per_tokens=64",
        " (served: 128)",
    ),
    (
        lambda: quant.per_channel_cast_fused((Q8, S_G128), "e4m3", 128, num_per_channels=64),
        "per_channel_cast_fused: num_per_channels=64",
        " with x = (data, sf) (served: 128)",
    ),
    (
        lambda: quant.per_channel_cast_fused(X, "e4m3", 128, num_per_channels=128),
        "per_channel_cast_fused: num_per_channels=128",
        " (served: None)",
    ),
    (
        lambda: quant.per_channel_cast_fused((Q8, S_G128.int()), "e4m3", 128, False, 128),
        "per_channel_cast_fused: x[1].dtype=torch.int32",
        " (served: torch.float32)",
    ),
    (
        lambda: quant.per_channel_cast(X, "e4m3", 32),
        "per_channel_cast: num_per_tokens=32",
        " (served: 128)",
    ),
    (
        lambda: quant.per_channel_cast(X, "e2m1", 128),
        "per_channel_cast: fmt='e2m1'",
        " (served: 'e4m3')",
    ),
    (
        lambda: quant.per_block_cast(X, "e4m3", (64, 64)),
        "per_block_cast: block_size=(64, 64)",
        " (served: (128, 128))",
    ),
    (
        lambda: quant.per_block_cast(X, "e2m1", (128, 128)),
        "per_block_cast: fmt='e2m1'",
        " (served: 'e4m3')",
    ),
    (
        lambda: quant.cast_back((Q8, S_G128), "fp16", (1, 128)),
        "cast_back: fmt='fp16'",
        " (served: 'bf16', 'fp32')",
    ),
    (
        lambda: quant.cast_back((Q8, S_G128), "bf16", (1, 16)),
        "cast_back: x_block_size=(1, 16)",
        " (served: (1, 32), (1, 64), (1, 128), (128, 128), (1, hidden=256))",
    ),
    (
        lambda: quant.cast_back((Q8, S_G128), "bf16", (1, 128), "e4m3"),
        "cast_back: x_special_fmt='e4m3'",
        " (served: 'e5m6')",
    ),
    (
        lambda: quant.cast_back((QE, S_BLOCK), "bf16", (128, 128), "e5m6"),
        "cast_back: x_block_size=(128, 128)",
        " with x_special_fmt='e5m6' (served: (1, n), hidden=256)",
    ),
    (
        lambda: quant.per_token_cast_back((QE, S_G128), "bf16", 4, "e5m6"),
        "per_token_cast_back: num_per_channels=4",
        " with x_special_fmt='e5m6' (served: a multiple of 8 dividing hidden, hidden=256)",
    ),
    (
        lambda: quant.cast_back((Q4.view(torch.int8), S4), "bf16", (1, 64)),
        "cast_back: x_block_size=(1, 64)",
        " with e2m1 data (served: (1, 16), (1, 32))",
    ),
    (
        lambda: quant.cast_back((Q4.view(torch.int8), E4.view(I32)), "bf16", (1, 32)),
        "cast_back: x[1].dtype=torch.int32",
        " with e2m1 data (served: torch.float32)",
    ),
    (
        lambda: quant.per_token_cast_back((Q8, S_G128), "bf16", 16),
        "per_token_cast_back: num_per_channels=16",
        " (served: 32, 64, 128, hidden=256)",
    ),
    (
        lambda: compat.torch.swiglu_backward((Q8, S_G128), *BWD[2:], 64),
        "swiglu_backward: num_per_channels=64",
        " (served: 32, 128)",
    ),
    (
        lambda: compat.torch.swiglu_backward((Q8, S_G128), BWD[2].float(), *BWD[3:], 128),
        "swiglu_backward: grad_out.dtype=torch.float32",
        " (served: torch.bfloat16)",
    ),
    (
        lambda: quant.swiglu_backward_and_per_token_cast((Q8, S_G128), *BWD[2:], 16),
        "swiglu_backward_and_per_token_cast: num_per_channels=16",
        " (served: 32, 128)",
    ),
    (
        lambda: quant.swiglu_forward_and_per_token_cast(GATE, "e4m3", 256),
        "swiglu_forward_and_per_token_cast: num_per_channels=256",
        " (served: 128)",
    ),
    (
        lambda: quant.swiglu_forward_and_per_token_cast(GATE, "e4m3", 128, pos_to_expert=PTT),
        "swiglu_forward_and_per_token_cast: pos_to_expert=<tensor (8,) int32>",
        " (served: None)",
    ),
    (
        lambda: quant.swiglu_forward_and_per_token_cast(GATE, "e4m3", 128, clamped_count=PTT),
        "swiglu_forward_and_per_token_cast: clamped_count=<tensor (8,) int32>",
        " (served: None)",
    ),
    (
        lambda: quant.swiglu_forward_and_per_token_cast(GATE, "e4m3", 128, sf_clamp_min=1e-6),
        "swiglu_forward_and_per_token_cast: sf_clamp_min=1e-06",
        " (served: None)",
    ),
    (
        lambda: moe.top2_sum_gate(LOGITS, BIAS, 6, 4, 8, False, 1, 2.5, 0, 4, 1, 2, "softmax"),
        "top2_sum_gate: scoring_func='softmax'",
        " (served: 'sigmoid')",
    ),
    (
        lambda: moe.top2_sum_gate(
            LOGITS, BIAS, 6, 4, 8, False, 0, 1.0, 0, 1, 0, 1, "sigmoid", mask=PTT > 0
        ),
        "top2_sum_gate: mask=<tensor (8,) bool>",
        " (served: None)",
    ),
    (
        lambda: moe.top2_sum_gate(
            LOGITS, BIAS, 6, 4, 8, False, 0, 1.0, 0, 1, 0, 1, "sigmoid", to_physical_map=PTT
        ),
        "top2_sum_gate: to_physical_map=<tensor (8,) int32>",
        " (served: None)",
    ),
    (
        lambda: moe.reduce_fused((Y, S_TOK), None, POS),
        "reduce_fused: x=(<tensor (16, 256) bfloat16>, <tensor (8, 1) float32>)",
        " (served: a tensor, without per-row scales)",
    ),
    (
        lambda: moe.reduce_fused(Y, None, POS, "e4m3"),
        "reduce_fused: fp8_format='e4m3'",
        " (served: '')",
    ),
    (
        lambda: moe.expand_to_fused_with_sf((HID2, SF_FUSED), 128, FUSED_POS, FUSED_PTE),
        "expand_to_fused_with_sf: x[0].dtype=torch.bfloat16",
        " (served: torch.float8_e4m3fn, torch.uint8, torch.int8)",
    ),
    (
        lambda: moe.expand_to_fused_with_sf((Q_FUSED, SF_FUSED), 64, FUSED_POS, FUSED_PTE),
        "expand_to_fused_with_sf: num_per_channels=64",
        " (served: 32, 128)",
    ),
    (
        lambda: moe.reduce_fused(Y, None, POS, sf=S_TOK[0]),
        "reduce_fused: sf=<tensor (1,) float32>",
        " (served: None)",
    ),
]


_WITH_MAIN_GRAD = t(4, 256)
_WITH_MAIN_GRAD.main_grad = t(4, 256, dtype=F32)
NOT_SERVED += [
    (
        lambda: moe.mask_indices_by_tp(IDX32.short(), 64, 4, 1, 2),
        "mask_indices_by_tp: indices.dtype=torch.int16",
        " (served: torch.int32, torch.int64)",
    ),
    (
        lambda: moe.group_count(IDX32.to(torch.uint8), 64),
        "group_count: group_idx.dtype=torch.uint8",
        " (served: torch.int32, torch.int64)",
    ),
    (
        lambda: moe.aux_fi(IDX32.short(), 64, 6),
        "aux_fi: topk_idx.dtype=torch.int16",
        " (served: torch.int32, torch.int64)",
    ),
    (
        lambda: moe.inplace_unique_group_indices(IDX32.to(torch.uint8), 64),
        "inplace_unique_group_indices: group_indices.dtype=torch.uint8",
        " (served: torch.int32, torch.int64)",
    ),
    (
        lambda: compat.modeling.engram.engram_gate(
            ENG_H, ENG_K, ENG_V, ENG_W, _WITH_MAIN_GRAD, 0.5, 1e-5
        ),
        "engram_gate: weight_embed.main_grad=<tensor (4, 256) float32>",
        " (served: no main_grad)",
    ),
]


@pytest.mark.parametrize(("call", "head", "tail"), NOT_SERVED, ids=[c[1] for c in NOT_SERVED])
def test_option_not_served_is_one_line(fake, cpu_as_cuda, call, head, tail):
    with pytest.raises(NotImplementedError) as info:
        call()
    assert str(info.value) == f"tileaot.tile_kernels.{head} is not served yet{tail}"
    assert not fake.launches


def test_tileaot_imports_without_the_compat_module():
    """`import tileaot` stays torch-free: the compat package is imported only by name."""
    import subprocess
    import sys

    code = (
        "import sys, tileaot; print('tileaot.tile_kernels' in sys.modules, 'torch' in sys.modules)"
    )
    env_path = str(importlib.import_module("tileaot").__file__).rsplit("/tileaot/", 1)[0]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": env_path, "PATH": ""},
    )
    assert out.stdout.split() == ["False", "False"]


def test_mhc_pre_norm_fn_within_tilekernels_bound(references):
    """Its test's data (fn ~ 1e-4, a norm weight ~ 1 + 0.1 randn) and bound (``atol = rtol =
    1e-3``) against ``mhc_pre_norm_fn_ref``."""
    g = torch.Generator().manual_seed(11)
    res = torch.randn(1, 7, 4, 1280, generator=g).bfloat16()
    fn = torch.randn(24, 4 * 1280, generator=g) * 1e-4
    w = torch.randn(4 * 1280, generator=g) * 0.1 + 1.0
    ref = tk("mhc").mhc_pre_norm_fn_ref
    for weight in (None, w):
        got = ops.mhc_pre_norm_fn(res, fn, weight, 1e-6)
        torch.testing.assert_close(got, ref(res, fn, weight, 1e-6), atol=1e-3, rtol=1e-3)


def test_mhc_pre_norm_fn_is_differentiable_as_tilekernels(fake, cpu_as_cuda, monkeypatch):
    """Gradients of residual, mhc_fn and the norm weight (TileKernels' ``fuse_grad_acc`` and
    ``n_splits`` change nothing), the backward launch standing in as its kernel's reference:
    against autograd through ``mhc_pre_norm_fn_ref`` (float32 math) within float32 sums and
    a bf16 ulp of residual's gradient."""
    from kernels_py.mhc import mhc_pre_norm_fn_backward as pnf_bwd

    monkeypatch.setattr(
        importlib.import_module("tileaot.mhc_pre_norm_fn_backward"),
        "mhc_pre_norm_fn_backward",
        pnf_bwd.reference,
    )
    functions = importlib.import_module("tileaot._grad")._FUNCTIONS
    monkeypatch.delitem(functions, "mhc_pre_norm_fn", raising=False)  # built with the stand-in
    g = torch.Generator().manual_seed(12)
    res = torch.randn(1, 7, 4, 256, generator=g).bfloat16()
    fn = torch.randn(24, 4 * 256, generator=g) * 1e-2
    w = torch.randn(4 * 256, generator=g) * 0.1 + 1.0
    grad = torch.randn(1, 7, 24, generator=g)
    for weight, fuse in ((None, False), (w, True)):
        inputs = (res, fn) if weight is None else (res, fn, weight)
        ours = [v.clone().requires_grad_() for v in inputs]
        theirs = [v.clone().requires_grad_() for v in inputs]
        ops.mhc_pre_norm_fn(*ours[:2], (ours + [None])[2], 1e-6, fuse, 4).backward(grad)
        tk("mhc").mhc_pre_norm_fn_ref(*theirs[:2], (theirs + [None])[2], 1e-6).backward(grad)
        a, b = ours[0].grad.float(), theirs[0].grad.float()
        torch.testing.assert_close(a, b, rtol=2**-7, atol=1e-5)
        for a, b in zip(ours[1:], theirs[1:], strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert [fake.by_handle[x.handle][0] for x in fake.launches] == ["mhc_pre_norm_fn"] * 2


@pytest.mark.parametrize("flags", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize(("rows", "cols", "out_block"), [(7, 96, (1, 32)), (129, 416, (128, 128))])
def test_lossless_scale_layouts_are_tilekernels(references, flags, rows, cols, out_block):
    """per_block_cast_lossless's scales in TileKernels' layouts: the shapes and strides its
    own allocation and epilogue (`tile_kernels.quant.common`) give, and the exponents its
    kernel stores (`tk_kernel_oracle`, padding bytes 0 where its CTAs store them); the scale
    input of each layout read back as our row-major scales."""
    from test_kernels_cpu_per_block_cast_lossless import inputs, m, tk_kernel_oracle

    col, packed = flags
    x, e = inputs(rows, cols, (1, 32), seed=rows, sf="ue8m0")
    fmt = "ue8m0" if packed else "fp32"
    _, ours = m.reference(x, e, (1, 32), out_block, fmt)
    ours = quant.tma_scales(ours, col, packed)
    theirs = kernel_sf((rows, cols), "e4m3", out_block, col, packed)
    assert (ours.dtype, ours.shape, ours.stride()) == (theirs.dtype, theirs.shape, theirs.stride())
    _, big, full = tk_kernel_oracle(x, m._exponents(e), (1, 32), out_block)
    if packed:
        got = ours.new_empty(ours.shape).copy_(ours).view(torch.uint8).long()
        stored = full >= 0
        assert torch.equal(got[stored], full[stored]) and not got[~stored].any()
    else:
        assert torch.equal(m._exponents(ours), big)
    # the scale input: each layout TileKernels reads, back to our row-major scales
    given = e if packed else (e.int() << 23).view(F32)
    back = quant.lossless_input_scales(quant.tma_scales(given, col, packed), rows, cols, (1, 32))
    assert torch.equal(back, given)
