"""Valid calls of every public op, drawn at random, for the fuzz tests (tests/test_fuzz.py).

A builder draws the sizes and options of one valid call of its op and describes each tensor
argument (a *slot*): the name error messages use for it, the dtypes it may take with every
other argument fixed, and the dims no other value may take. test_fuzz.py then breaks one thing
at a time. The rules are written from each op's docstring, not from its code, so a wrapper that
checks less (or other things) than it documents shows up as a failing example.

`Draw.huge` builds the call from meta tensors whose sizes may pass 2**31 (shapes without
memory); the fuzz test decides from the shapes alone whether such a call must be refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
E4M3, U8, I32 = torch.float8_e4m3fn, torch.uint8, torch.int32
FLOATS = (BF16, FP16, FP32)
BAD_EPS = [-1e-6, math.nan, math.inf, "1e-6", True, None]


@dataclass
class Slot:
    """One tensor argument of a call; `dtypes` are those it may take (or that switch the op to
    another mode: the fuzz test never mutates a slot into them)."""

    name: str
    dtypes: tuple
    bound: tuple[int, ...] = ()  # dims whose every other value makes the call invalid
    fixed_rank: bool = True  # adding or dropping a dim makes the call invalid
    optional: bool = False  # None is a valid value
    unused: bool = False  # checked but never handed to a kernel


@dataclass
class Call:
    args: dict[str, Any]
    returns: list  # (shape, dtype) of each returned tensor (None: a None in the result)
    launches: bool  # whether the call launches a kernel (some output element to write)
    slots: dict[tuple, Slot] = field(default_factory=dict)
    bad: dict[str, list] = field(default_factory=dict)  # non-tensor argument -> refused values
    check: Callable[[Any], None] | None = None  # GPU: asserts the result against the reference

    def slot(self, path: tuple, *args: Any, **kwargs: Any) -> None:
        self.slots[path] = Slot(*args, **kwargs)


class Draw:
    """Random choices of one call; tensors are CPU, CUDA or (huge) meta tensors."""

    def __init__(self, data: Any, device: str, huge: bool = False) -> None:
        self._data, self.huge = data, huge
        self.device = "meta" if huge else device
        self._huge_drawn = False  # one huge size per call: meta tensors still need nbytes < 2**63

    def pick(self, options: Any) -> Any:
        return self._data.draw(st.sampled_from(options))

    def flag(self) -> bool:
        return self._data.draw(st.booleans())

    def int(self, lo: int, hi: int) -> int:
        return self._data.draw(st.integers(lo, hi))

    def size(self, hi: int, *, lo: int = 0, step: int = 1, big: bool = True) -> int:
        """`step` times an int in [lo, hi]; with `huge`, maybe (once) 2**30 or 2**31 (multiples
        of every step used here) for sizes no other rule bounds."""
        if self.huge and big and not self._huge_drawn and self.flag():
            self._huge_drawn = True
            return self.pick([2**30, 2**31])
        return step * self.int(lo, hi)

    def lead(self, max_dims: int, hi: int = 4) -> tuple[int, ...]:
        return tuple(self.size(hi) for _ in range(self.int(0, max_dims)))

    def randn(self, shape: tuple, dtype: Any, scale: float = 1.0) -> torch.Tensor:
        if self.huge:
            return torch.empty(shape, dtype=dtype, device="meta")
        return (torch.randn(shape, device=self.device) * scale).to(dtype)

    def randint(self, lo: int, hi: int, shape: tuple, dtype: Any = I32) -> torch.Tensor:
        if self.huge:
            return torch.empty(shape, dtype=dtype, device="meta")
        return torch.randint(lo, hi, shape, dtype=dtype, device=self.device)

    def empty(self, shape: tuple, dtype: Any) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=self.device)

    def outs(self, call: Call, specs: list[tuple[str, tuple, Any]], *, pair: bool = True) -> bool:
        """Maybe pass `out=`: one tensor (pair=False) or a tuple, one per (name, shape, dtype).
        Never with meta tensors: they all start at address 0, so any two would overlap."""
        if self.huge or not self.flag():
            return False
        tensors = [self.empty(shape, dtype) for _, shape, dtype in specs]
        call.args["out"] = tuple(tensors) if pair else tensors[0]
        for i, (name, shape, dtype) in enumerate(specs):
            path = ("out", i) if pair else ("out",)
            call.slot(path, name, (dtype,), every(shape), optional=not pair)
        return True


def every(shape: tuple) -> tuple[int, ...]:
    return tuple(range(len(shape)))


def _ref(module: str) -> Callable:
    import importlib

    return importlib.import_module(f"kernels_py.{module}").reference


def bits(t: torch.Tensor) -> torch.Tensor:
    """`t` as integers of its width: bit-exact comparisons that NaN cannot fool."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _same_bits(got: Any, want: Any) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and torch.equal(bits(g), bits(w.to(g.dtype))), (g, w)


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> None:
    torch.testing.assert_close(got, want.to(got.dtype), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- norm, gemm, activations
def rms_norm(d: Draw) -> Call:
    dt = d.pick(FLOATS)
    x = d.randn((*d.lead(2), d.size(80)), dt)
    w, eps = d.randn((x.shape[-1],), dt), d.pick([0.0, 1e-6, 0.25])
    c = Call(
        {"x": x, "weight": w, "eps": eps}, [(x.shape, dt)], x.numel() > 0, bad={"eps": BAD_EPS}
    )
    out = d.outs(c, [("out", x.shape, dt)], pair=False)
    c.slot(("x",), "x", (dt,), every(x.shape) if out else (x.dim() - 1,), fixed_rank=out)
    c.slot(("weight",), "weight", (dt,), (0,))
    tol = {BF16: (1.6e-2, 1e-2), FP16: (2e-3, 1e-3), FP32: (1e-5, 1e-5)}[dt]  # tests/test_gpu.py
    c.check = lambda y: _close(y, _ref("norm.rms_norm")(x, w, eps), *tol)
    return c


def gemm(d: Draw) -> Call:
    dt = d.pick((BF16, FP16))
    m, n, k = d.size(40), d.size(8, step=8), d.size(8, step=8)
    a, b = d.randn((m, k), dt), d.randn((n, k), dt)
    c = Call({"a": a, "b": b}, [((m, n), dt)], m * n * k > 0)
    out = d.outs(c, [("out", (m, n), dt)], pair=False)
    c.slot(("a",), "a", (dt,), (0, 1) if out else (1,))
    c.slot(("b",), "b", (dt,), (0, 1))

    def check(y: torch.Tensor) -> None:  # fp32 accumulation, other order (tests/test_gpu.py)
        ref = _ref("gemm.gemm")(a, b).float()
        assert ((y.float() - ref).norm() <= 1e-2 * ref.norm()).item()

    c.check = check
    return c


def swiglu(d: Draw) -> Call:
    dt = d.pick(FLOATS)
    lead, h = d.lead(2), d.size(70)
    x = d.randn((*lead, 2 * h), dt, 4.0)
    c = Call({"x": x}, [((*lead, h), dt)], math.prod(lead) * h > 0)
    out = d.outs(c, [("out", (*lead, h), dt)], pair=False)
    c.slot(
        ("x",),
        "x",
        (dt,) if out else FLOATS,
        every(x.shape) if out else (x.dim() - 1,),
        fixed_rank=out,
    )
    c.check = lambda y: _same_bits([y], [_ref("act.swiglu")(x)])  # tests/test_gpu_swiglu.py
    return c


def swiglu_per_token_cast_fp8(d: Draw) -> Call:
    m, h = d.size(30), d.size(3, step=128)
    x = d.randn((m, 2 * h), BF16, 4.0)
    w = d.randn((m,), FP32) if d.flag() else None
    clamp = d.pick([None, 7.0, 1e-3])
    round_sf = d.flag()
    groups = h // 128
    c = Call(
        {"x": x, "weights": w, "clamp": clamp, "round_sf": round_sf},
        [((m, h), E4M3), ((m, groups), FP32)],
        m * h > 0,
        bad={"clamp": [0.0, -1.0, math.inf, math.nan, 1e39, "7", True], "round_sf": [1, None]},
    )
    out = d.outs(c, [("out[0] (q)", (m, h), E4M3), ("out[1] (scale)", (m, groups), FP32)])
    c.slot(("x",), "x", (BF16,), (0, 1) if out or w is not None else (1,))
    if w is not None:
        c.slot(("weights",), "weights", (FP32,), (0,), optional=True)

    def check(result: Any) -> None:  # bit-exact (tests/test_gpu_swiglu.py)
        _same_bits(result, _ref("act.swiglu_per_token_cast_fp8")(x, w, clamp, round_sf))

    c.check = check
    return c


def swiglu_per_channel_cast_and_transpose(d: Draw) -> Call:
    """Written from tileaot.swiglu_per_channel_cast_and_transpose's docstring: bf16 x [T, 2H]
    with T % num_per_tokens == 0 (32 or 128) and H % 8 == 0; q [H, T] e4m3 and scale
    [T // num_per_tokens, H] float32; an optional clamp; no element of q launches nothing."""
    g = d.pick((32, 128))
    t, h = d.size(6, step=g, big=False), d.size(30, step=8)
    x = d.randn((t, 2 * h), BF16, 4.0)
    clamp = d.pick([None, 7.0, 1e-3])
    round_sf = d.flag()
    scales = (t // g, h)
    c = Call(
        {"x": x, "num_per_tokens": g, "clamp": clamp, "round_sf": round_sf},
        [((h, t), E4M3), (scales, FP32)],
        t * h > 0,
        bad={
            "clamp": [0.0, -1.0, math.inf, math.nan, 1e39, "7", True],
            "round_sf": [1, None],
            "num_per_tokens": [64, 0, None, 128.0],
        },
    )
    out = d.outs(c, [("out[0] (q)", (h, t), E4M3), ("out[1] (scale)", scales, FP32)])
    c.slot(("x",), "x", (BF16,), (0, 1) if out else ())

    def check(result: Any) -> None:  # bit-exact (its GPU test file)
        ref = _ref("act.swiglu_per_channel_cast_and_transpose")
        _same_bits(result, ref(x, g, clamp, round_sf))

    c.check = check
    return c


def swiglu_backward(d: Draw) -> Call:
    """Written from tileaot.swiglu_backward's docstring: e4m3 x [M, 2H] with float32 scales
    x_sf [M, 2H / P] (P 32 or 128, H % P == 0), bf16 grad_out [M, H], float32 weight [T, K],
    int32 pos_to_token_topk [M] and token_topk_to_pos [T, K] one the inverse of the other (a
    fused mapping); out, x_grad of out_dtype (float32 by default), weight_grad float32; M == 0
    launches nothing."""
    p = d.pick([32, 128])
    h, t, k = d.size(3, step=p), d.size(20), d.size(8)
    if d.huge:  # shapes only
        m = d.size(60)
        p2tk, tk2p = d.randint(-1, t * k, (m,)), d.randint(-1, m, (t, k))
    else:
        from _fused_mapping import fused_mapping

        _, tk2p = fused_mapping(d.randint(-1, d.int(1, 12), (t, k)).cpu(), 12, 16)
        m = (int(tk2p.max()) + 1 if tk2p.numel() else 0) + d.pick([0, 5])
        live = tk2p.reshape(-1) >= 0
        p2tk = torch.full((m,), -1, dtype=I32)
        p2tk[tk2p.reshape(-1)[live].long()] = torch.arange(t * k, dtype=I32)[live]
        p2tk, tk2p = p2tk.to(d.device), tk2p.to(d.device)
    # within e4m3's range: a value past 448 would cast to NaN, and NaN != NaN in the check
    x = d.randn((m, 2 * h), FP32, 100.0).clamp(-448, 448).to(E4M3)
    x_sf = d.randn((m, 2 * h // p), FP32, 0.01).abs()
    grad_out, weight = d.randn((m, h), BF16), d.randn((t, k), FP32).abs()
    clamp, out_dt = d.pick([None, 0.5, 10.0]), d.pick([None, FP32, BF16])
    dt = FP32 if out_dt is None else out_dt
    c = Call(
        {
            "x": x,
            "x_sf": x_sf,
            "grad_out": grad_out,
            "weight": weight,
            "pos_to_token_topk": p2tk,
            "token_topk_to_pos": tk2p,
            "swiglu_clamp_value": clamp,
            "out_dtype": out_dt,
        },
        [((m, h), dt), ((m, 2 * h), dt), ((t, k), FP32)],
        m * h > 0,
        bad={"swiglu_clamp_value": [-1.0, math.nan, math.inf, "7", True]},
    )
    names = ("out[0] (out)", "out[1] (x_grad)", "out[2] (weight_grad)")
    d.outs(c, [(n, shape, dtype) for n, (shape, dtype) in zip(names, c.returns, strict=True)])
    c.slot(("x",), "x", (E4M3,), (0, 1))
    c.slot(("x_sf",), "x_sf", (FP32,), (0,))
    c.slot(("grad_out",), "grad_out", (BF16,), (0, 1))
    c.slot(("weight",), "weight", (FP32,), (0, 1))
    c.slot(("pos_to_token_topk",), "pos_to_token_topk", (I32,), (0,))
    c.slot(("token_topk_to_pos",), "token_topk_to_pos", (I32,), (0, 1))

    def check(result: Any) -> None:  # out, x_grad bit-exact (tests/test_gpu_swiglu_backward.py)
        want = _ref("act.swiglu_backward")(x, x_sf, grad_out, weight, p2tk, tk2p, clamp, dt)
        _same_bits(result[:2], want[:2])
        _close(result[2], want[2], rtol=1e-4, atol=1e-4)

    c.check = check
    return c


# ---------------------------------------------------------------- casts
def per_token_cast_fp8(d: Draw) -> Call:
    return _per_token_cast_fp8(d, ["g128", "none", "n"])


def per_token_cast_fp8_groups(d: Draw) -> Call:
    """The narrower groups, apart so that per_token_cast_fp8's seeded calls stay as recorded."""
    return _per_token_cast_fp8(d, ["g32", "g64"])


def _per_token_cast_fp8(d: Draw, modes: list[str]) -> Call:
    dt, mode = d.pick(FLOATS), d.pick(modes)
    grouped = mode[0] == "g"
    m = d.size(40)
    n = d.size(3 * 128 // int(mode[1:]), step=int(mode[1:])) if grouped else d.size(300)
    group = int(mode[1:]) if grouped else {"none": None, "n": n}[mode]
    groups = n // group if grouped else 1
    x = d.randn((m, n), dt, 10.0)
    round_sf = d.flag()
    # Widths other than 32, 64, 128 and N (48 stands in for 64 where 64 divides N: the same
    # list length keeps the seeded draws where they were).
    bad_groups = [g for g in (64 if n % 64 else 48, 0, 256, -128, 1) if g not in (group, n)]
    c = Call(
        {"x": x, "group_size": group, "round_sf": round_sf},
        [((m, n), E4M3), ((m, groups), FP32)],
        m * n > 0,
        bad={"group_size": [*bad_groups, "128", 128.0, True], "round_sf": [0, "True"]},
    )
    out = d.outs(c, [("out[0] (q)", (m, n), E4M3), ("out[1] (scale)", (m, groups), FP32)])
    # q has x's shape, and a group needs N % group == 0; but with group_size=N a changed N is
    # group_size's error.
    if out:
        x_bound = (0,) if mode == "n" else (0, 1)
    else:
        x_bound = (1,) if grouped else ()
    c.slot(("x",), "x", FLOATS, x_bound)

    def check(result: Any) -> None:  # bit-exact (tests/test_gpu.py)
        q, s = _ref("quant.per_token_cast_fp8")(x, group or n, round_sf)
        _same_bits(result, (q, s.reshape(m, groups)))

    c.check = check
    return c


def per_block_cast_fp8(d: Draw) -> Call:
    dt, m, n = d.pick(FLOATS), d.size(200), d.size(200)
    x = d.randn((m, n), dt, 10.0)
    blocks = (-(-m // 128), -(-n // 128))
    round_sf = d.flag()
    c = Call(
        {"x": x, "round_sf": round_sf},
        [((m, n), E4M3), (blocks, FP32)],
        m * n > 0,
        bad={"round_sf": [1, None]},
    )
    out = d.outs(c, [("out[0] (q)", (m, n), E4M3), ("out[1] (scale)", blocks, FP32)])
    c.slot(("x",), "x", FLOATS, (0, 1) if out else ())
    c.check = lambda result: _same_bits(result, _ref("quant.per_block_cast_fp8")(x, round_sf))
    return c


def per_block_cast_lossless(d: Draw) -> Call:
    """Written from tileaot.per_block_cast_lossless's docstring: packed e2m1 x uint8 [M, N/2]
    (N % 32 == 0), x_sf [ceil(M / x_block_m), ceil(N / x_block_k)] float32 or UE8M0 uint8;
    q [M, N] e4m3, scale [ceil(M / block_m), ceil(N / block_k)] float32 or uint8 by
    scale_format; no element of q launches nothing."""
    (im, ik), (om, ok) = d.pick([((1, 32), (128, 128)), ((1, 32), (1, 128)), ((1, 16), (32, 64))])
    m, n = d.size(200), d.size(6, step=32)
    sf_dt, fmt = d.pick([FP32, U8]), d.pick(["fp32", "ue8m0"])
    x = d.randint(0, 256, (m, n // 2), U8)
    sf_shape = (-(-m // im), -(-n // ik))
    e = d.randint(120, 132, sf_shape, U8)  # exponents spanning 11: lossless
    x_sf = e if sf_dt == U8 else (e.int() << 23).view(FP32) if not d.huge else e.to(FP32)
    out_dt = FP32 if fmt == "fp32" else U8
    scales = (-(-m // om), -(-n // ok))
    args = {"x": x, "x_sf": x_sf, "x_block_m": im, "x_block_k": ik, "block_m": om}
    args.update(block_k=ok, scale_format=fmt)
    c = Call(
        args,
        [((m, n), E4M3), (scales, out_dt)],
        m * n > 0,
        bad={
            "x_block_k": [24, 0, 32.0, None],
            "block_k": [96, 1, "128"],
            "scale_format": ["e4m3", 1],
        },
    )
    d.outs(c, [("out[0] (q)", (m, n), E4M3), ("out[1] (scale)", scales, out_dt)])
    c.slot(("x",), "x", (U8,), (0, 1))
    c.slot(("x_sf",), "x_sf", (FP32, U8), (0, 1))

    def check(result: Any) -> None:  # bit-exact (tests/test_gpu_per_block_cast_lossless.py)
        want = _ref("quant.per_block_cast_lossless")(x, x_sf, (im, ik), (om, ok), fmt)
        _same_bits(result, want)

    c.check = check
    return c


def per_channel_cast_fp8(d: Draw) -> Call:
    dt, m, n = d.pick(FLOATS), d.size(300), d.size(200)
    x = d.randn((m, n), dt, 10.0)
    scales = (-(-m // 128), n)  # one per column of every 128 rows
    round_sf = d.flag()
    c = Call(
        {"x": x, "round_sf": round_sf},
        [((m, n), E4M3), (scales, FP32)],
        m * n > 0,
        bad={"round_sf": [1, None]},
    )
    out = d.outs(c, [("out[0] (q)", (m, n), E4M3), ("out[1] (scale)", scales, FP32)])
    c.slot(("x",), "x", FLOATS, (0, 1) if out else ())
    c.check = lambda result: _same_bits(result, _ref("quant.per_channel_cast_fp8")(x, round_sf))
    return c


def per_channel_cast_fused(d: Draw) -> Call:
    """Written from tileaot.per_channel_cast_fused's docstring: bf16/fp16/fp32 x [T, N] (any
    N), or e4m3 x (N % 128 == 0) with its float32 x_sf [T, N // 128]; int32 pos_to_token [P]
    (-1 and indices past T: zero rows; P within one launch); q [P, N] e4m3 and scale
    [ceil(P / 128), N] float32; no element of q launches nothing."""
    fp8 = d.flag()
    dt = E4M3 if fp8 else d.pick(FLOATS)
    t, p = d.size(30), d.size(300, big=False)
    n = d.size(3, step=128) if fp8 else d.size(200)
    x = d.randn((t, n), FP32, 10.0).to(dt)
    x_sf = d.randn((t, n // 128), FP32).abs() if fp8 else None
    pos = d.randint(-1, t + 2, (p,))
    round_sf = d.flag()
    scales = (-(-p // 128), n)
    c = Call(
        {"x": x, "pos_to_token": pos, "x_sf": x_sf, "round_sf": round_sf},
        [((p, n), E4M3), (scales, FP32)],
        p * n > 0,
        bad={"round_sf": [1, None]},
    )
    out = d.outs(c, [("out[0] (q)", (p, n), E4M3), ("out[1] (scale)", scales, FP32)])
    c.slot(("x",), "x", (dt,) if fp8 else FLOATS, (0, 1) if fp8 else ((1,) if out else ()))
    c.slot(("pos_to_token",), "pos_to_token", (I32,), (0,) if out else ())
    if fp8:
        c.slot(("x_sf",), "x_sf", (FP32,), (0, 1))

    def check(result: Any) -> None:  # bit-exact (tests/test_gpu_per_channel_cast_fused.py)
        _same_bits(result, _ref("quant.per_channel_cast_fused")(x, pos, x_sf, round_sf))

    c.check = check
    return c


def per_channel_cast_and_transpose(d: Draw) -> Call:
    """Written from tileaot.per_channel_cast_and_transpose's docstring: bf16/fp16 x [T, H]
    with T % num_per_tokens == 0 (32 or 128; T within one launch) and H % 8 == 0; q [H, T]
    e4m3 and scale [T // num_per_tokens, H] float32; no element of x launches nothing."""
    dt, g = d.pick((BF16, FP16)), d.pick((32, 128))
    t, h = d.size(6, step=g, big=False), d.size(30, step=8)
    x = d.randn((t, h), dt, 10.0)
    round_sf = d.flag()
    scales = (t // g, h)
    c = Call(
        {"x": x, "num_per_tokens": g, "round_sf": round_sf},
        [((h, t), E4M3), (scales, FP32)],
        t * h > 0,
        bad={"round_sf": [1, None], "num_per_tokens": [64, 0, None, 128.0]},
    )
    out = d.outs(c, [("out[0] (q)", (h, t), E4M3), ("out[1] (scale)", scales, FP32)])
    c.slot(("x",), "x", (BF16, FP16), (0, 1) if out else ())

    def check(result: Any) -> None:  # bit-exact (tests/test_gpu_per_channel_cast_and_transpose.py)
        _same_bits(result, _ref("quant.per_channel_cast_and_transpose")(x, g, round_sf))

    c.check = check
    return c


def per_token_cast_e5m6(d: Draw) -> Call:
    dt, m, n = d.pick((BF16, FP32)), d.size(200), d.size(40, step=8)  # N % 8 == 0
    x = d.randn((m, n), dt, 10.0)
    round_sf = d.flag()
    c = Call(
        {"x": x, "round_sf": round_sf},
        [((m, n // 8 * 12), U8), ((m, 1), FP32)],
        m * n > 0,
        bad={"round_sf": [1, None]},
    )
    out = d.outs(c, [("out[0] (q)", (m, n // 8 * 12), U8), ("out[1] (scale)", (m, 1), FP32)])
    c.slot(("x",), "x", (BF16, FP32), (0, 1) if out else ())
    c.check = lambda result: _same_bits(result, _ref("quant.per_token_cast_e5m6")(x, round_sf))
    return c


def cast_back_e5m6(d: Draw) -> Call:
    m, n = d.size(200), d.size(40, step=8)  # N % 8 == 0: 12 bytes per 8 codes
    pieces = n // 8
    g = d.pick([1, pieces] if pieces else [1])  # groups of N / G columns, a multiple of 8
    q = d.randint(0, 256, (m, pieces * 12), U8)  # every code: NaN and inf ones too
    scale = d.randn((m, g), FP32, 100.0)
    out_dtype = d.pick([None, BF16, FP32])
    out_dt = out_dtype or BF16
    c = Call(
        {"q": q, "scale": scale, "out_dtype": out_dtype},
        [((m, n), out_dt)],
        m * n > 0,
        bad={"out_dtype": [FP16, "bf16"]},
    )
    out = d.outs(c, [("out", (m, n), out_dt)], pair=False)
    c.slot(("q",), "q", (U8,), (0, 1) if out else (0,))
    c.slot(("scale",), "scale", (FP32,), (0,))

    def check(x: torch.Tensor) -> None:  # bit-exact; NaN where the reference has NaN
        want = _ref("quant.cast_back_e5m6")(q, scale, out_dt)
        nan = want.isnan()
        assert torch.equal(x.isnan(), nan)
        _same_bits([x[~nan]], [want[~nan]])

    c.check = check
    return c


def _scale_shape(layout: str, m: int, n: int) -> tuple[int, int]:
    if layout[0] == "g":
        return (m, n // int(layout[1:]))
    return {"token": (m, 1), "block128": (-(-m // 128), -(-n // 128))}[layout]


def cast_back(d: Draw) -> Call:
    """FP8 q; the layout is passed or inferred, group_size passed or not."""
    return _cast_back(d, ["g128", "token", "block128"])


def cast_back_groups(d: Draw) -> Call:
    """The narrower groups, apart so that cast_back's seeded calls stay as recorded."""
    return _cast_back(d, ["g32", "g64"])


def _cast_back(d: Draw, layouts: list[str]) -> Call:
    layout = d.pick(layouts)
    width = int(layout[1:]) if layout[0] == "g" else 128
    m = d.size(200)
    n = d.size(3 * 128 // width, step=width) if layout[0] == "g" else d.size(200)
    q = d.randn((m, n), FP32, 50.0).to(E4M3)
    scale = d.randn(_scale_shape(layout, m, n), FP32).abs() + 0.5
    given = d.flag()
    group = d.pick([None, n if layout == "token" else width])
    out_dtype = d.pick([None, BF16, FP32])
    out_dt = out_dtype or BF16
    # 1000 (never N here) stands where 64 stood before g64, so the seeded draws stay put.
    bad_groups = [g for g in (64 if n == 64 else 1000, -1, 0) if g not in (width, n)]
    args = {
        "q": q,
        "scale": scale,
        "layout": layout if given else None,
        "group_size": group,
        "out_dtype": out_dtype,
    }
    c = Call(
        args,
        [((m, n), out_dt)],
        m * n > 0,
        bad={
            "layout": ["g16", "TOKEN", 128],
            "group_size": [*bad_groups, "128", 1.5, True],
            "out_dtype": [FP16, "bf16", I32],
        },
    )
    out = d.outs(c, [("out", (m, n), out_dt)], pair=False)
    # Only a given layout pins the scale's shape (else another layout may fit the new one), and
    # q's dims only where that layout ties them without rounding (block128 rounds).
    q_bound = {"token": (0,), "block128": ()}.get(layout, (0, 1)) if given else ()
    c.slot(("q",), "q", (E4M3, U8), (0, 1) if out else q_bound)  # uint8: the FP4 path
    c.slot(("scale",), "scale", (FP32,), (0, 1) if given else ())

    def check(x: torch.Tensor) -> None:  # exact (tests/test_gpu_cast_back.py)
        _same_bits([x], [_ref("quant.cast_back_fp8")(q, scale, layout, out_dt)])

    c.check = check
    return c


def cast_back_fp4(d: Draw) -> Call:
    """Packed FP4 q (uint8) through tileaot.cast_back."""
    g, lead = d.pick([16, 32]), d.lead(2, hi=6)
    n = d.size(6, step=g)
    q = d.randint(0, 256, (*lead, n // 2), U8)
    if d.flag():
        scale = d.randint(110, 140, (*lead, n // g), U8)  # UE8M0 exponents: 2**-17 .. 2**12
    else:
        scale = (d.randn((*lead, n // g), FP32).abs() + 0.1).to(E4M3)
    out_dtype = d.pick([None, BF16, FP32])
    out_dt = out_dtype or BF16
    c = Call(
        {"q": q, "scale": scale, "group_size": g, "out_dtype": out_dtype},
        [((*lead, n), out_dt)],
        q.numel() > 0,
        bad={"group_size": [8, 64, 0, "32", 32.0, True, None], "out_dtype": [FP16, "bf16"]},
    )
    d.outs(c, [("out", (*lead, n), out_dt)], pair=False)
    c.slot(("q",), "q", (U8, E4M3), every(q.shape))  # float8: the FP8 path
    c.slot(("scale",), "scale", (U8, E4M3), every(scale.shape))

    def check(x: torch.Tensor) -> None:  # bit-exact (tests/test_gpu_cast_back_fp4.py)
        rows = (-1, n // 2)  # the reference takes 2-D q and scale
        want = _ref("quant.cast_back_fp4")(q.reshape(rows), scale.reshape(-1, n // g), g, out_dt)
        _same_bits([x], [want.reshape(x.shape)])

    c.check = check
    return c


def per_token_cast_fp4(d: Draw) -> Call:
    dt, g, fmt = d.pick(FLOATS), d.pick([16, 32]), d.pick(["ue8m0", "e4m3"])
    lead = d.lead(2, hi=6)
    n = d.size(6, step=g)
    x = d.randn((*lead, n), dt, 5.0)
    s_dt = U8 if fmt == "ue8m0" else E4M3
    q_shape, s_shape = (*lead, n // 2), (*lead, n // g)
    c = Call(
        {"x": x, "group_size": g, "scale_format": fmt},
        [(q_shape, U8), (s_shape, s_dt)],
        x.numel() > 0,
        bad={"group_size": [8, 64, 0, "32", 32.0, True], "scale_format": ["mx", "E4M3", 1, None]},
    )
    out = d.outs(c, [("out[0] (q)", q_shape, U8), ("out[1] (scale)", s_shape, s_dt)])
    c.slot(("x",), "x", FLOATS, every(x.shape) if out else (x.dim() - 1,), fixed_rank=out)

    def check(result: Any) -> None:  # bit-exact; the reference takes 2-D x
        q, scale = _ref("quant.per_token_cast_fp4")(x.reshape(-1, n), g, fmt)
        _same_bits(result, (q.reshape(q_shape), scale.reshape(s_shape)))

    c.check = check
    return c


# ---------------------------------------------------------------- layout, mhc
TRANSPOSE_DTYPES = (
    E4M3,
    torch.float8_e5m2,
    torch.int8,
    U8,
    torch.bool,
    BF16,
    torch.int16,
    FP16,
    FP32,
    I32,
)


def transpose(d: Draw) -> Call:
    dt = d.pick(TRANSPOSE_DTYPES)
    lead, r, c_ = d.lead(2, hi=3), d.size(40), d.size(40)
    x = d.randn((*lead, r, c_), dt, 100.0)
    shape = (*lead, c_, r)
    c = Call({"x": x}, [(shape, dt)], x.numel() > 0)
    out = d.outs(c, [("out", shape, dt)], pair=False)
    c.slot(
        ("x",),
        "x",
        (dt,) if out else TRANSPOSE_DTYPES,
        every(x.shape) if out else (),
        fixed_rank=out,
    )
    c.check = lambda y: _same_bits([y], [_ref("layout.transpose")(x)])
    return c


_SINKHORN_BAD = {"repeat": [0, -1, 65537, 1.5, "3", True, None], "eps": BAD_EPS}


def _sinkhorn64(logits: torch.Tensor, repeat: int, eps: float) -> torch.Tensor:
    from test_gpu_sinkhorn import _sinkhorn64

    return _sinkhorn64(logits.double(), repeat, eps)


def sinkhorn_normalize(d: Draw) -> Call:
    n = d.size(16, big=False)
    x = d.randn((*d.lead(2, hi=5), n, n), FP32)
    repeat, eps = d.pick([1, 2, 3, 10]), d.pick([0.0, 1e-6, 0.1])
    c = Call(
        {"logits": x, "repeat": repeat, "eps": eps},
        [(x.shape, FP32)],
        x.numel() > 0,
        bad=_SINKHORN_BAD,
    )
    out = d.outs(c, [("out", x.shape, FP32)], pair=False)
    square = (x.dim() - 2, x.dim() - 1)
    c.slot(("logits",), "logits", (FP32,), every(x.shape) if out else square, fixed_rank=out)

    def check(p: torch.Tensor) -> None:  # bound of tests/test_gpu_sinkhorn.py
        want = _sinkhorn64(x, repeat, eps)
        assert ((p.double() - want).abs() <= 2e-6 + 1e-5 * want.abs()).all()

    c.check = check
    return c


def sinkhorn_normalize_backward(d: Draw) -> Call:
    n = d.size(16, big=False)
    x = d.randn((*d.lead(2, hi=5), n, n), FP32)
    go = d.randn(x.shape, FP32)
    repeat, eps = d.pick([1, 2, 3, 10]), d.pick([0.0, 1e-6, 0.1])
    c = Call(
        {"grad_out": go, "logits": x, "repeat": repeat, "eps": eps},
        [(x.shape, FP32)],
        x.numel() > 0,
        bad=_SINKHORN_BAD,
    )
    d.outs(c, [("out", x.shape, FP32)], pair=False)
    c.slot(("grad_out",), "grad_out", (FP32,), every(x.shape))
    c.slot(("logits",), "logits", (FP32,), every(x.shape))

    def check(grad: torch.Tensor) -> None:  # bound of tests/test_gpu_sinkhorn.py
        leaf = x.double().requires_grad_(True)
        (want,) = torch.autograd.grad(_sinkhorn64(leaf, repeat, eps), leaf, go.double())
        assert (grad.double() - want).abs().max() <= 1e-5 * want.abs().max()

    c.check = check
    return c


def expand_to_mhc(d: Draw) -> Call:
    lead, h, r = d.lead(2), d.size(70), d.pick([1, 2, 4, 8])
    x = d.randn((*lead, h), BF16)
    shape = (*lead, r, h)
    c = Call(
        {"hidden": x, "mhc_mult": r},
        [(shape, BF16)],
        math.prod(shape) > 0,
        bad={"mhc_mult": [0, -1, 1.5, "4", True, None]},
    )
    out = d.outs(c, [("out", shape, BF16)], pair=False)
    c.slot(("hidden",), "hidden", (BF16,), every(x.shape) if out else (), fixed_rank=out)
    c.check = lambda y: _same_bits([y], [_ref("mhc.expand_to_mhc")(x, r)])  # a copy
    return c


def expand_to_mhc_backward(d: Draw) -> Call:
    lead, h, r = d.lead(2), d.size(70), d.pick([1, 2, 4, 8])
    go = d.randn((*lead, r, h), BF16)
    shape = (*lead, h)
    c = Call({"grad_out": go}, [(shape, BF16)], r > 0 and math.prod(shape) > 0)
    out = d.outs(c, [("out", shape, BF16)], pair=False)
    tied = tuple(i for i in every(go.shape) if i != go.dim() - 2)  # out= ties all but R
    c.slot(("grad_out",), "grad_out", (BF16,), tied if out else (), fixed_rank=out)
    # tests/test_gpu_expand_to_mhc.py: bit-exact (float32 sums in order, rounded once)
    c.check = lambda g: _same_bits([g], [_ref("mhc.expand_to_mhc_backward")(go)])
    return c


def mhc_pre_apply_mix(d: Draw) -> Call:
    lead, h, r = d.lead(2), d.size(70), d.pick([1, 2, 4, 8])
    x = d.randn((*lead, r, h), BF16)
    mix = d.randn((*lead, r, 1), FP32)
    shape = (*lead, h)
    c = Call({"x": x, "mix": mix}, [(shape, BF16)], math.prod(shape) > 0)
    out = d.outs(c, [("out", shape, BF16)], pair=False)
    tied = every(x.shape)[:-1]  # mix ties the leading dims and R (H: only out= does)
    c.slot(("x",), "x", (BF16,), every(x.shape) if out else tied, fixed_rank=out)
    c.slot(("mix",), "mix", (FP32,), every(mix.shape))

    def check(y: torch.Tensor) -> None:  # tests/test_gpu_mhc_pre_apply_mix.py's bound
        _close(y, _ref("mhc.mhc_pre_apply_mix")(x, mix), rtol=1e-3, atol=1e-2)

    c.check = check
    return c


def mhc_pre_apply_mix_backward(d: Draw) -> Call:
    lead, h, r = d.lead(2), d.size(70), d.pick([1, 2, 4, 8])
    go = d.randn((*lead, h), BF16)
    x = d.randn((*lead, r, h), BF16)
    mix = d.randn((*lead, r, 1), FP32)
    c = Call(
        {"grad_out": go, "x": x, "mix": mix},
        [(x.shape, BF16), (mix.shape, FP32)],
        mix.numel() > 0 and h > 0,
    )
    d.outs(c, [("grad_x", x.shape, BF16), ("grad_mix", mix.shape, FP32)])
    c.slot(("grad_out",), "grad_out", (BF16,), every(go.shape))
    c.slot(("x",), "x", (BF16,), every(x.shape))
    c.slot(("mix",), "mix", (FP32,), every(mix.shape))

    def check(grads: tuple) -> None:  # tests/test_gpu_mhc_pre_apply_mix.py's bounds
        want = _ref("mhc.mhc_pre_apply_mix_backward")(go, x, mix)
        for g, w in zip(grads, want, strict=True):
            _close(g, w, rtol=1e-3, atol=1e-2)

    c.check = check
    return c


def _post_inputs(d: Draw) -> tuple:
    lead, h, r = d.lead(2), d.size(70), d.pick([1, 2, 4, 8])
    x = d.randn((*lead, h), BF16)
    residual = d.randn((*lead, r, h), BF16)
    post, comb = d.randn((*lead, r, 1), FP32), d.randn((*lead, r, r), FP32)
    return x, residual, post, comb


def _post_slots(c: Call, tensors: dict) -> None:
    """Every dim of every input ties to another input's (leading dims, R, H, the 1)."""
    for name, t in tensors.items():
        c.slot((name,), name, (t.dtype,), every(t.shape))


def mhc_post(d: Draw) -> Call:
    x, residual, post, comb = _post_inputs(d)
    args = {"x": x, "residual": residual, "post_layer_mix": post, "comb_res_mix": comb}
    c = Call(dict(args), [(residual.shape, BF16)], residual.numel() > 0)
    d.outs(c, [("out", residual.shape, BF16)], pair=False)
    _post_slots(c, args)

    def check(y: torch.Tensor) -> None:  # tests/test_gpu_mhc_post.py's bound
        _close(y, _ref("mhc.mhc_post")(x, residual, post, comb), rtol=1.6e-2, atol=1e-5)

    c.check = check
    return c


def mhc_post_backward(d: Draw) -> Call:
    x, residual, post, comb = _post_inputs(d)
    go = d.randn(residual.shape, BF16)
    args = {"grad_out": go, "x": x, "residual": residual, "post_layer_mix": post}
    args["comb_res_mix"] = comb
    shapes = [(x.shape, BF16), (residual.shape, BF16), (post.shape, FP32), (comb.shape, FP32)]
    c = Call(dict(args), shapes, residual.numel() > 0)
    names = ("grad_x", "grad_residual", "grad_post_layer_mix", "grad_comb_res_mix")
    d.outs(c, [(n, s, dt) for n, (s, dt) in zip(names, shapes, strict=True)])
    _post_slots(c, args)

    def check(grads: tuple) -> None:  # tests/test_gpu_mhc_post.py's bounds
        want = _ref("mhc.mhc_post_backward")(go, x, residual, post, comb)
        for g, w in zip(grads, want, strict=True):
            tol = (1.6e-2, 1e-5) if g.dtype == BF16 else (1e-4, 1e-4)
            _close(g, w, rtol=tol[0], atol=tol[1])

    c.check = check
    return c


_MIX_FLOAT_BAD = [math.nan, math.inf, 1e39, "2", True, None]


def mhc_pre_split_mixes(d: Draw) -> Call:
    lead, r = d.lead(2), d.pick([1, 2, 4, 8])
    k = r * (r + 2)
    x = d.randn((*lead, k), FP32, 3.0)
    scale, base = d.randn((3,), FP32), d.randn((k,), FP32)
    c_, eps = d.pick([2.0, 1.0, -0.5]), d.pick([1e-6, 0.0, 1e-2])
    args = {"input_mixes": x, "mhc_scale": scale, "mhc_base": base, "mhc_mult": r}
    args |= {"mhc_post_mult_value": c_, "mhc_pre_eps": eps}
    shapes = [((*lead, r, 1), FP32), ((*lead, r, 1), FP32), ((*lead, r, r), FP32)]
    c = Call(args, shapes, math.prod(lead) > 0)
    c.bad = {"mhc_mult": [0, -1, r + 1, 1.5, "4", True, None]}
    c.bad |= {"mhc_post_mult_value": _MIX_FLOAT_BAD, "mhc_pre_eps": _MIX_FLOAT_BAD}
    names = ("pre_layer_mix", "post_layer_mix", "comb_res_mix")
    out = d.outs(c, [(n, s, dt) for n, (s, dt) in zip(names, shapes, strict=True)])
    # K ties to mhc_base and mhc_mult; the leading dims only to out=
    c.slot(
        ("input_mixes",),
        "input_mixes",
        (FP32,),
        every(x.shape) if out else (len(lead),),
        fixed_rank=out,
    )
    c.slot(("mhc_scale",), "mhc_scale", (FP32,), (0,))
    c.slot(("mhc_base",), "mhc_base", (FP32,), (0,))

    def check(mixes: tuple) -> None:  # tests/test_gpu_mhc_mixes.py: the reference's
        want = _ref("mhc.mhc_pre_split_mixes")(x, scale, base, r, c_, eps)
        _same_bits(mixes, want)

    c.check = check
    return c


def mhc_head_compute_mix(d: Draw) -> Call:
    lead, r = d.lead(2), d.pick([1, 2, 4, 8, 5])
    x = d.randn((*lead, r), FP32, 3.0)
    scale, base, eps = d.randn((1,), FP32), d.randn((r,), FP32), d.pick([1e-6, 0.0, 1e-2])
    args = {"input_mix": x, "mhc_scale": scale, "mhc_base": base, "mhc_pre_eps": eps}
    c = Call(args, [(x.shape, FP32)], x.numel() > 0)
    c.bad = {"mhc_pre_eps": _MIX_FLOAT_BAD}
    out = d.outs(c, [("out", x.shape, FP32)], pair=False)
    # R ties to mhc_base; the leading dims only to out=
    lead_dims = every(x.shape) if out else (len(lead),)
    c.slot(("input_mix",), "input_mix", (FP32,), lead_dims, fixed_rank=out)
    c.slot(("mhc_scale",), "mhc_scale", (FP32,), (0,))
    c.slot(("mhc_base",), "mhc_base", (FP32,), (0,))
    # tests/test_gpu_mhc_mixes.py: the reference's values
    c.check = lambda y: _same_bits([y], [_ref("mhc.mhc_head_compute_mix")(x, scale, base, eps)])
    return c


def _tf32(x: torch.Tensor) -> torch.Tensor:
    from _gpu_helpers import tf32

    return tf32(x)


def _close_sums(got: torch.Tensor, want: torch.Tensor) -> None:
    """The token sums: float32 sums in another order (tests/test_gpu_mhc_mixes.py's bound)."""
    _close(got, want, rtol=1e-4, atol=1e-4)


def mhc_pre_split_mixes_backward(d: Draw) -> Call:
    lead, r = d.lead(2), d.pick([1, 2, 4, 8])
    k = r * (r + 2)
    grads = [d.randn((*lead, r, n), FP32) for n in (1, 1, r)]
    x, scale, base = d.randn((*lead, k), FP32, 3.0), d.randn((3,), FP32), d.randn((k,), FP32)
    c_ = d.pick([2.0, 1.0, 0.0])
    names = ("pre_layer_mix_grad", "post_layer_mix_grad", "comb_res_mix_grad")
    args = dict(zip(names, grads, strict=True))
    args |= {"input_mixes": x, "mhc_scale": scale, "mhc_base": base, "mhc_post_mult_value": c_}
    shapes = [(x.shape, FP32), ((3,), FP32), ((k,), FP32)]
    c = Call(args, shapes, math.prod(lead) > 0)
    c.bad = {"mhc_post_mult_value": _MIX_FLOAT_BAD}
    out_names = ("input_mixes_grad", "mhc_scale_grad", "mhc_base_grad")
    d.outs(c, [(n, s, dt) for n, (s, dt) in zip(out_names, shapes, strict=True)])
    for name, t in args.items():  # every dim ties to another input's
        if isinstance(t, torch.Tensor):
            c.slot((name,), name, (FP32,), every(t.shape))

    def check(got: tuple) -> None:  # tests/test_gpu_mhc_mixes.py's bounds
        want = _ref("mhc.mhc_pre_split_mixes_backward")(*grads, x, scale, base, c_)
        _same_bits(got[:1], want[:1])
        for g, w in zip(got[1:], want[1:], strict=True):
            _close_sums(g, w)

    c.check = check
    return c


def mhc_head_compute_mix_backward(d: Draw) -> Call:
    lead, r = d.lead(2), d.pick([1, 2, 4, 8, 5])
    g, x = d.randn((*lead, r), FP32), d.randn((*lead, r), FP32, 3.0)
    scale, base = d.randn((1,), FP32), d.randn((r,), FP32)
    args = {"output_mix_grad": g, "input_mix": x, "mhc_scale": scale, "mhc_base": base}
    shapes = [(x.shape, FP32), ((1,), FP32), ((r,), FP32)]
    c = Call(args, shapes, x.numel() > 0)
    for name, t in args.items():  # every dim ties to another input's
        c.slot((name,), name, (FP32,), every(t.shape))
    out_names = ("input_mix_grad", "mhc_scale_grad", "mhc_base_grad")
    d.outs(c, [(n, s, dt) for n, (s, dt) in zip(out_names, shapes, strict=True)])

    def check(got: tuple) -> None:  # tests/test_gpu_mhc_mixes.py's bounds
        want = _ref("mhc.mhc_head_compute_mix_backward")(g, x, scale, base)
        _same_bits(got[:1], want[:1])
        for a, w in zip(got[1:], want[1:], strict=True):
            _close_sums(a, w)

    c.check = check
    return c


def mhc_pre_norm_fn(d: Draw) -> Call:
    lead, r, h = d.lead(2), d.pick([1, 2, 4, 8]), d.size(70, lo=2)  # H = 1: [N, R] is [N, R, H]
    n = d.pick([1, 7, 24, 32])
    residual = d.randn((*lead, r, h), BF16)
    fn = d.randn((n, r * h), FP32, 1e-2)
    shape = (*lead, n)
    args = {"residual": residual, "mhc_fn": fn, "mhc_norm_weight": None, "mhc_norm_eps": 1e-6}
    c = Call(args, [(shape, FP32)], math.prod(shape) > 0, bad={"mhc_norm_eps": BAD_EPS})
    out = d.outs(c, [("out", shape, FP32)], pair=False)
    tail = every(residual.shape)[-2:]  # R and H tie to mhc_fn's columns R * H
    c.slot(("residual",), "residual", (BF16,), every(residual.shape) if out else tail,
           fixed_rank=out)  # fmt: skip
    # [N, R * H] or [N, R, H] are both valid: a dim added can make the other layout
    c.slot(("mhc_fn",), "mhc_fn", (FP32,), (0, 1) if out else (1,), fixed_rank=False)

    def check(y: torch.Tensor) -> None:  # tests/test_gpu_mhc_pre_norm_fn.py's bound
        _close(y, _ref("mhc.mhc_pre_norm_fn")(residual, fn, 1e-6), rtol=1e-3, atol=1e-3)

    c.check = check
    return c


def mhc_pre_norm_fn_backward(d: Draw) -> Call:
    lead, r, h = d.lead(2), d.pick([1, 2, 4, 8]), d.size(70, lo=2)  # H = 1: [N, R] is [N, R, H]
    n = d.pick([1, 7, 24, 32])
    g, residual = d.randn((*lead, n), FP32), d.randn((*lead, r, h), BF16)
    fn = d.randn((n, r * h), FP32, 1e-2)
    args = {"out_grad": g, "residual": residual, "mhc_fn": fn, "mhc_norm_eps": 1e-6}
    c = Call(args, [(residual.shape, BF16), (fn.shape, FP32)], g.numel() > 0)
    c.bad = {"mhc_norm_eps": BAD_EPS}
    d.outs(c, [("residual_grad", residual.shape, BF16), ("mhc_fn_grad", fn.shape, FP32)])
    c.slot(("out_grad",), "out_grad", (FP32,), every(g.shape))  # every dim ties to another's
    c.slot(("residual",), "residual", (BF16,), every(residual.shape))
    # [N, R * H] or [N, R, H] are both valid: a dim added can make the other layout
    c.slot(("mhc_fn",), "mhc_fn", (FP32,), (0, 1), fixed_rank=False)

    def check(got: tuple) -> None:  # tests/test_gpu_mhc_pre_norm_fn_backward.py's bounds
        # fn as the kernel's tensor cores take it (TF32, TileKernels' round_to_tf32); gd is
        # rounded there too: half a TF32 unit (2**-11) of each |gd| |fn| and |gd| |x| term.
        want = _ref("mhc.mhc_pre_norm_fn_backward")(g, residual, _tf32(fn), 1e-6)
        x = residual.flatten(-2).float().reshape(-1, r * h)
        gd = g.reshape(-1, n).abs() * (x.square().mean(-1, keepdim=True) + 1e-6).rsqrt()
        x_slack = 2**-11 * float((gd @ fn.abs()).amax()) if gd.numel() else 0.0
        fn_slack = 2**-11 * float((gd.t() @ x.abs()).amax()) if gd.numel() else 0.0
        _close(got[0].float(), want[0].float(), rtol=2**-7, atol=1e-5 + x_slack)  # a bf16 ulp
        _close(got[1], want[1], rtol=1e-4, atol=1e-4 + fn_slack)

    c.check = check
    return c


# ---------------------------------------------------------------- mixture of experts
def topk_gate(d: Draw) -> Call:
    t, e = d.size(40), d.pick([1, 2, 7, 16, 64, 100, 256, 512])
    k = d.int(1, min(32, e))
    scoring, renorm = d.pick(["softmax", "sigmoid"]), d.flag()
    scores = d.randn((t, e), FP32, 3.0)
    c = Call(
        {"scores": scores, "k": k, "scoring": scoring, "renormalize": renorm},
        [((t, k), I32), ((t, k), FP32)],
        t > 0,
        bad={
            "k": [0, -1, min(32, e) + 1, 2.0, "2", True, None],
            "scoring": ["relu", "", 1, None],
            "renormalize": [1, 0, "yes", None],
        },
    )
    out = d.outs(c, [("out[0] (idx)", (t, k), I32), ("out[1] (weights)", (t, k), FP32)])
    c.slot(("scores",), "scores", (FP32,), (0,) if out else ())

    def check(result: Any) -> None:  # tests/test_gpu_topk_gate.py
        idx, w = _ref("moe.topk_gate")(scores, k, scoring, renorm)
        assert torch.equal(result[0].long(), idx.long())
        torch.testing.assert_close(result[1], w.float(), rtol=1e-6, atol=1e-12)

    c.check = check
    return c


def top2_sum_gate(d: Draw) -> Call:
    """Written from tileaot.top2_sum_gate's docstring: groups (or none), shared columns, EP/TP."""
    t = d.size(40)
    e = d.pick([2, 7, 16, 64, 72, 160, 256, 384, 512])
    groups = d.pick([g for g in (0, 1, 2, 4, 8, 16) if g == 0 or e % g == 0])
    kept = d.int(1, groups) if groups else 0
    size = e // groups if groups else e
    limited = groups != kept
    if limited and size < 2:  # a group's value sums its top two: no group limit then
        kept = groups
        limited = False
    shared = d.int(0, 2)
    k = d.int(1, min(e, 32 - shared, kept * size if limited else e))
    ep = d.pick([r for r in (1, 2, 4, 8) if r <= e])
    tp = d.pick([1, 2])
    tp_rank = d.int(0, tp - 1)
    scaling = d.pick([1.0, 2.5, -0.5])
    logits = d.randn((t, e), FP32, 3.0)
    bias = d.randn((e,), FP32, 0.1)
    args = (k, groups, kept, scaling, shared, ep, tp_rank, tp)
    names = ("k", "num_groups", "num_topk_groups", "routed_scaling_factor")
    names += ("num_shared_experts", "num_ep_ranks", "tp_rank", "num_tp_ranks")
    width = k + shared
    c = Call(
        {"logits": logits, "bias": bias, **dict(zip(names, args, strict=True))},
        [((t, width), I32), ((t, width), FP32)],
        t > 0,
        bad={
            "k": [0, -1, e + 1, 33 - shared, 2.0, "2", True, None],
            "num_groups": [-1, 1.0, None] + ([e + 1] if e > 2 else []),
            "num_topk_groups": [-1, groups + 1, None],
            "routed_scaling_factor": [math.nan, math.inf, "1", None, True],
            "num_shared_experts": [-1, 33 - k, 1.5, None],
            "num_ep_ranks": [0, e + 1, 1.0, None],
            "tp_rank": [-1, tp, None],
            "num_tp_ranks": [0, 1.5, None],
            "scoring_func": ["softmax", "Sigmoid", 1, None],
        },
    )
    out = d.outs(c, [("out[0] (idx)", (t, width), I32), ("out[1] (weights)", (t, width), FP32)])
    c.slot(("logits",), "logits", (FP32,), (0, 1) if out else (1,))
    c.slot(("bias",), "bias", (FP32,), (0,))

    def check(result: Any) -> None:  # tests/test_gpu_top2_sum_gate.py
        idx, w = _ref("moe.top2_sum_gate")(logits, bias, *args)
        assert torch.equal(result[0], idx)
        assert torch.allclose(result[1], w, equal_nan=True)

    c.check = check
    return c


def topk_sum_and_topk_group_idx(d: Draw) -> Call:
    """Written from tileaot.topk_sum_and_topk_group_idx's docstring: [T, G, S] scores, G <= 32,
    n in {1, 2} with n <= S, 1 <= K <= G."""
    t, g, s = d.size(40), d.int(1, 32), d.int(1, 20)
    n, k = d.int(1, min(2, s)), d.int(1, g)
    scores = d.randn((t, g, s), FP32)
    c = Call(
        {"scores": scores, "num_topk_sum": n, "num_topk_groups": k},
        [((t, k), I32)],
        t > 0,
        bad={
            "num_topk_sum": [0, 3, -1, 1.0, "1", True, None] + ([2] if s == 1 else []),
            "num_topk_groups": [0, -1, g + 1, 1.0, None],
        },
    )
    out = d.outs(c, [("out", (t, k), I32)], pair=False)
    c.slot(("scores",), "scores", (FP32,), (0,) if out else ())

    def check(result: Any) -> None:  # tests/test_gpu_topk_sum_and_topk_group_idx.py
        assert torch.equal(result, _ref("moe.topk_sum_and_topk_group_idx")(scores, n, k))

    c.check = check
    return c


def normalize_weight(d: Draw) -> Call:
    """Written from tileaot.normalize_weight's docstring: [T, K] float32 weights."""
    t, k = d.size(40), d.size(12, lo=1)  # K = 0 is refused (nothing to normalise)
    w = d.randn((t, k), FP32)
    c = Call({"topk_weights": w}, [((t,), FP32), ((t, k), FP32)], t > 0)
    out = d.outs(
        c, [("out[0] (denominator)", (t,), FP32), ("out[1] (normalized_weights)", (t, k), FP32)]
    )
    c.slot(("topk_weights",), "topk_weights", (FP32,), (0, 1) if out else ())
    c.check = lambda r: _same_bits(r, _ref("moe.normalize_weight")(w))  # bit for bit
    return c


def mask_indices_by_tp(d: Draw) -> Call:
    """Written from tileaot.mask_indices_by_tp's docstring: int32 [T, K] indices (-1 and
    indices past n included), num_ep_ranks <= n, 0 <= tp_rank < num_tp_ranks."""
    t, k = d.size(40), d.size(10)
    ep = d.pick([1, 2, 4, 8])
    n = ep * d.int(1, 40)
    tp = d.pick([1, 2, 4])
    tp_rank = d.int(0, tp - 1)
    indices = d.randint(-1, n + 2, (t, k))
    args = {"n": n, "num_ep_ranks": ep, "tp_rank": tp_rank, "num_tp_ranks": tp}
    c = Call(
        {"indices": indices, **args},
        [((t, k), I32)],
        t * k > 0,
        bad={
            "n": [ep - 1, 2**31, 1.0, None],
            "num_ep_ranks": [0, -1, n + 1, 1.0, None],
            "tp_rank": [-1, tp, 0.0, None],
            "num_tp_ranks": [0, 2**31, 1.5, None],
        },
    )
    out = d.outs(c, [("out", (t, k), I32)], pair=False)
    c.slot(("indices",), "indices", (I32,), (0, 1) if out else ())

    def check(result: Any) -> None:  # tests/test_gpu_mask_indices_by_tp.py
        assert torch.equal(result, _ref("moe.mask_indices_by_tp")(indices, n, ep, tp_rank, tp))

    c.check = check
    return c


def group_count(d: Draw) -> Call:
    """Written from tileaot.group_count's docstring: int32 [T, K] indices (negatives and
    indices >= G not counted), G >= 0; G = 0 or no indices launches nothing."""
    t, k, g = d.size(40), d.size(10), d.pick([0, 1, 7, 256, 8192, 8200])
    group_idx = d.randint(-2, g + 2, (t, k))
    c = Call(
        {"group_idx": group_idx, "num_groups": g},
        [((g,), I32)],
        g > 0 and t * k > 0,  # no indices: the counts are zeroed without a launch
        bad={"num_groups": [-1, 2**31, 1.0, "8", True, None]},
    )
    d.outs(c, [("out", (g,), I32)], pair=False)
    c.slot(("group_idx",), "group_idx", (I32,), ())

    def check(result: Any) -> None:  # tests/test_gpu_group_count.py
        assert torch.equal(result, _ref("moe.group_count")(group_idx, g))

    c.check = check
    return c


def aux_fi(d: Draw) -> Call:
    """Written from tileaot.aux_fi's docstring: int32 [T, K] indices (negatives and indices
    >= E not counted), E >= 0, num_aux_topk >= 1; float32 count * E / (T * num_aux_topk);
    E = 0 or no indices launches nothing."""
    t, k, e = d.size(40), d.size(10), d.pick([0, 1, 7, 256, 8192, 8200])
    a = d.pick([1, 2, 8, 2**31 - 1])
    topk_idx = d.randint(-2, e + 2, (t, k))
    c = Call(
        {"topk_idx": topk_idx, "num_experts": e, "num_aux_topk": a},
        [((e,), FP32)],
        e > 0 and t * k > 0,  # no indices: zeros without a launch
        bad={
            "num_experts": [-1, 2**31, 1.0, "8", True, None],
            "num_aux_topk": [0, -1, 2**31, 1.0, None],
        },
    )
    d.outs(c, [("out", (e,), FP32)], pair=False)
    c.slot(("topk_idx",), "topk_idx", (I32,), ())

    def check(result: Any) -> None:  # tests/test_gpu_aux_fi.py
        # the reference on the CPU: torch on CUDA divides by a Python int via its reciprocal
        _same_bits([result.cpu()], [_ref("moe.aux_fi")(topk_idx.cpu(), e, a)])

    c.check = check
    return c


def inplace_unique_group_indices(d: Draw) -> Call:
    """Written from tileaot.inplace_unique_group_indices' docstring: int32 [T, K] indices,
    each repeat of a value to its left in the row becomes -1 (negatives compared too);
    num_groups in [0, 2**31) unused; no entry launches nothing."""
    t, k, g = d.size(40), d.size(10), d.pick([0, 1, 8, 2**31 - 1])
    group_indices = d.randint(-3, 6, (t, k))  # few values: many repeats
    c = Call(
        {"group_indices": group_indices, "num_groups": g},
        [((t, k), I32)],
        t * k > 0,
        bad={"num_groups": [-1, 2**31, 1.0, "8", True, None]},
    )
    out = d.outs(c, [("out", (t, k), I32)], pair=False)
    c.slot(("group_indices",), "group_indices", (I32,), (0, 1) if out else ())

    def check(result: Any) -> None:  # tests/test_gpu_inplace_unique_group_indices.py
        want = _ref("moe.inplace_unique_group_indices")(group_indices)
        assert torch.equal(result, want)

    c.check = check
    return c


def engram_hash(d: Draw) -> Call:
    """Written from tileaot.engram_hash's docstring: int32 ids [T, N] (N >= 2), int64
    multipliers [L, N], int32 vocab_sizes [L, N - 1, E] and offsets [L, (N - 1) * E]; an
    empty output (T, L or E zero) launches nothing."""
    t, n, lay, e = d.size(40), d.int(2, 5), d.size(3), d.size(9)
    cols = (n - 1) * e
    ids = d.randint(0, 2**31 - 1, (t, n))
    mult = d.randint(-(2**62), 2**62, (lay, n), torch.int64)  # products wrap
    sizes = d.randint(1, 2**31 - 1, (lay, n - 1, e))
    offsets = d.randint(-(2**31), 2**31 - 1, (lay, cols))  # sums wrap
    args = {"ngram_token_ids": ids, "multipliers": mult, "vocab_sizes": sizes, "offsets": offsets}
    c = Call(args, [((lay, t, cols), I32)], lay * t * cols > 0)
    out = d.outs(c, [("out", (lay, t, cols), I32)], pair=False)
    c.slot(("ngram_token_ids",), "ngram_token_ids", (I32,), (0, 1) if out else (1,))
    c.slot(("multipliers",), "multipliers", (torch.int64,), (0, 1))
    c.slot(("vocab_sizes",), "vocab_sizes", (I32,), (0, 1, 2))
    c.slot(("offsets",), "offsets", (I32,), (0, 1))

    def check(result: Any) -> None:  # tests/test_gpu_engram_hash.py
        assert torch.equal(result, _ref("engram.engram_hash")(ids, mult, sizes, offsets))

    c.check = check
    return c


def engram_fused_weight(d: Draw) -> Call:
    """Written from tileaot.engram_fused_weight's docstring: bf16 w_h, w_k [GW, H] (any H) ->
    float32 [GW, H], exact; no element launches nothing."""
    gw, n = d.size(6), d.size(300)
    w_h, w_k = d.randn((gw, n), BF16, 4.0), d.randn((gw, n), BF16, 4.0)
    c = Call({"w_h": w_h, "w_k": w_k}, [((gw, n), FP32)], gw * n > 0)
    d.outs(c, [("out", (gw, n), FP32)], pair=False)
    c.slot(("w_h",), "w_h", (BF16,), (0, 1))
    c.slot(("w_k",), "w_k", (BF16,), (0, 1))
    # bit-exact (tests/test_gpu_engram_fused_weight.py)
    c.check = lambda w: _same_bits([w], [_ref("engram.engram_fused_weight")(w_h, w_k)])
    return c


def engram_grad_w_reduce(d: Draw) -> Call:
    """Written from tileaot.engram_grad_w_reduce's docstring: float32 grad_w_partial [P, GW,
    H] (any P, P = 0 included), bf16 w_h, w_k and float32 acc_h, acc_k [GW, H] -> float32
    (grad_w_h, grad_w_k) [GW, H]; no element of them launches nothing."""
    p, gw, n = d.size(40, big=False), d.size(6), d.size(300)
    partial = d.randn((p, gw, n), FP32)
    w_h, w_k = d.randn((gw, n), BF16), d.randn((gw, n), BF16)
    acc_h, acc_k = d.randn((gw, n), FP32), d.randn((gw, n), FP32)
    args = {"grad_w_partial": partial, "w_h": w_h, "w_k": w_k, "acc_h": acc_h, "acc_k": acc_k}
    c = Call(args, [((gw, n), FP32), ((gw, n), FP32)], gw * n > 0)
    names = ("out[0] (grad_w_h)", "out[1] (grad_w_k)")
    d.outs(c, [(name, (gw, n), FP32) for name in names])
    c.slot(("grad_w_partial",), "grad_w_partial", (FP32,), (1, 2))
    for name, dt in (("w_h", BF16), ("w_k", BF16), ("acc_h", FP32), ("acc_k", FP32)):
        c.slot((name,), name, (dt,), (0, 1))

    def check(result: Any) -> None:  # the reference's emulated fma: ties aside, bit-exact
        want = _ref("engram.engram_grad_w_reduce")(partial, w_h, w_k, acc_h, acc_k)
        for got, ref in zip(result, want, strict=True):
            _close(got, ref, rtol=2**-23, atol=0.0)

    c.check = check
    return c


def moe_expand(d: Draw) -> Call:
    fp8 = d.flag()
    t, k, e = d.size(30), d.size(8), d.int(1, 40)
    align = d.pick([1, 2, 16, 128])
    h = d.size(2, step=128) if fp8 else d.size(64)
    dt = E4M3 if fp8 else BF16
    x = d.randn((t, h), FP32, 100.0).to(dt)
    x_scale = d.randn((t, h // 128), FP32).abs() if fp8 else None
    idx = d.randint(-1, e, (t, k))
    rows = t * k + e * (align - 1)
    shapes = [
        ("out[0] (x_sorted)", (rows, h), dt),
        ("out[1] (expert_offsets)", (e + 1,), I32),
        ("out[2] (token_pos)", (t, k), I32),
    ]
    if fp8:
        shapes.append(("out[3] (x_sorted_scale)", (rows, h // 128), FP32))
    c = Call(
        {"x": x, "idx": idx, "num_experts": e, "alignment": align, "x_scale": x_scale},
        [(s, dtype) for _, s, dtype in shapes] + ([] if fp8 else [None]),
        t * k > 0,
        bad={
            "num_experts": [0, 1025, 8.0, "8", True, None],
            "alignment": [0, 1025, 16.0, True, None],
        },
    )
    out = d.outs(c, shapes)
    c.slot(("x",), "x", (dt,), (0, 1) if fp8 or out else (0,))
    c.slot(("idx",), "idx", (I32,), (0, 1) if out else (0,))
    if fp8:
        c.slot(("x_scale",), "x_scale", (FP32,), (0, 1))

    def check(result: Any) -> None:
        from test_gpu_moe_expand import _check  # exact: offsets, positions, used rows

        _check("fuzz", x, x_scale, idx, result, e, align)

    c.check = check
    return c


def _fused_maps(d: Draw, t: int, k: int) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(P, token_topk_to_pos [T, K], pos_to_expert [P])``: TileKernels' get_fused_mapping
    layout (tests/_fused_mapping.py), maybe with rows past the last run; shapes only when
    huge."""
    if d.huge:
        p = d.size(60)
        return p, d.randint(-1, p, (t, k)), d.randint(-1, 4, (p,))
    from _fused_mapping import fused_mapping

    e, align = d.int(1, 40), d.pick([1, 2, 16, 128])
    idx = d.randint(-1, e, (t, k))
    total = len(fused_mapping(idx, e, align)[0])
    pte, pos = fused_mapping(idx, e, align, total + d.pick([0, 3]))
    return pte.shape[0], pos, pte


def expand_to_fused(d: Draw) -> Call:
    """Written from tileaot.expand_to_fused's docstring: bf16 or e4m3 x [T, H] (any H), int32
    token_topk_to_pos [T, K] and pos_to_expert [P] from TileKernels' get_fused_mapping (here
    tests/_fused_mapping.py), out [P, H] in x's dtype; P * H == 0 launches nothing, nor does
    T * K == 0 (zeros then)."""
    dt = d.pick([BF16, E4M3])
    t, k, h = d.size(30), d.size(8), d.size(64)
    x = d.randn((t, h), FP32, 100.0).to(dt)
    p, pos, pte = _fused_maps(d, t, k)
    c = Call(
        {"x": x, "token_topk_to_pos": pos, "pos_to_expert": pte},
        [((p, h), dt)],
        p * h * t * k > 0,
    )
    out = d.outs(c, [("out", (p, h), dt)], pair=False)
    c.slot(("x",), "x", (BF16, E4M3), (0, 1) if out else (0,))
    c.slot(("token_topk_to_pos",), "token_topk_to_pos", (I32,), (0,))
    c.slot(("pos_to_expert",), "pos_to_expert", (I32,), (0,) if out else ())

    def check(result: Any) -> None:  # bit-exact (tests/test_gpu_expand_to_fused.py)
        _same_bits((result,), (_ref("moe.expand_to_fused")(x, pos, pte),))

    c.check = check
    return c


def expand_to_fused_with_sf(d: Draw) -> Call:
    """Written from tileaot.expand_to_fused_with_sf's docstring: e4m3 x [T, H] (H >= 1) with
    float32 or int32 scale rows x_sf [T, F] (F >= 1), the maps as for expand_to_fused; out
    [P, H] e4m3 and out_sf [P, F] (column-major: [F, ceil(P / 4) * 4]) in x_sf's dtype;
    P == 0 or T * K == 0 launches nothing."""
    sdt, col = d.pick([FP32, I32]), d.flag()
    t, k, h, f = d.size(30), d.size(8), d.size(64, lo=1), d.size(8, lo=1, big=False)
    x = d.randn((t, h), FP32, 100.0).to(E4M3)
    x_sf = d.randint(-(2**31), 2**31 - 1, (t, f), I32)
    x_sf = x_sf if sdt == I32 else x_sf.view(FP32)  # any bits: NaN payloads too
    p, pos, pte = _fused_maps(d, t, k)
    sf_shape = (f, -(-p // 4) * 4) if col else (p, f)
    args = {"x": x, "x_sf": x_sf, "token_topk_to_pos": pos, "pos_to_expert": pte}
    c = Call(
        {**args, "use_tma_aligned_col_major_sf": col},
        [((p, h), E4M3), (sf_shape, sdt)],
        p * t * k > 0,
        bad={"use_tma_aligned_col_major_sf": [1, None]},
    )
    out = d.outs(c, [("out[0] (out)", (p, h), E4M3), ("out[1] (out_sf)", sf_shape, sdt)])
    c.slot(("x",), "x", (E4M3,), (0, 1) if out else (0,))
    c.slot(("x_sf",), "x_sf", (FP32, I32), (0, 1) if out else (0,))
    c.slot(("token_topk_to_pos",), "token_topk_to_pos", (I32,), (0,))
    c.slot(("pos_to_expert",), "pos_to_expert", (I32,), (0,) if out else ())

    def check(result: Any) -> None:  # bit-exact (tests/test_gpu_expand_to_fused_with_sf.py)
        want = _ref("moe.expand_to_fused_with_sf")(x, x_sf, pos, pte, "col" if col else "row")
        _same_bits(result, want)

    c.check = check
    return c


def moe_reduce(d: Draw) -> Call:
    y_dt = d.pick([BF16, FP32])
    p, h, t, k = d.size(40), d.size(64), d.size(30), d.size(8)
    y = d.randn((p, h), y_dt)
    pos = d.randint(-1, p, (t, k))  # rows of y_sorted, -1 for dropped slots
    w = d.randn((t, k), FP32).abs() if d.flag() else None
    out_dtype = d.pick([None, BF16, FP32])
    with_out = not d.huge and d.flag()  # meta tensors overlap (see Draw.outs)
    out_dt = out_dtype or (d.pick([BF16, FP32]) if with_out else y_dt)
    c = Call(
        {"y_sorted": y, "token_pos": pos, "weights": w, "out_dtype": out_dtype},
        [((t, h), out_dt)],
        t * h * k * p > 0,
        bad={"out_dtype": [FP16, "bf16", I32]},
    )
    if with_out:
        c.args["out"] = d.empty((t, h), out_dt)
        # Without out_dtype, out's dtype is the output dtype: either float is valid.
        c.slot(("out",), "out", (out_dt,) if out_dtype else (BF16, FP32), (0, 1), optional=True)
    c.slot(("y_sorted",), "y_sorted", (BF16, FP32), (1,) if with_out else ())
    pos_bound = (0, 1) if w is not None else ((0,) if with_out else ())
    c.slot(("token_pos",), "token_pos", (I32,), pos_bound)
    if w is not None:
        c.slot(("weights",), "weights", (FP32,), (0, 1), optional=True)

    def check(result: torch.Tensor) -> None:
        from test_gpu_moe_reduce import _assert_within_bound, _reference64

        want, magnitude = _reference64(y, pos, w)
        _assert_within_bound("fuzz", result, want, magnitude, _short(out_dt), k)

    c.check = check
    return c


def _short(dtype: Any) -> str:
    return {BF16: "bf16", FP32: "fp32"}[dtype]


# ---------------------------------------------------------------- engram
def _engram_inputs(d: Draw) -> tuple[Any, tuple, tuple, dict]:
    # On the GPU, values are checked: rows of >= 32 elements, as the gradient tolerance assumes
    # (for a handful of elements, rmsnorm's slope is ~eps/|k|^3 and the relative error of the
    # tiny gradient is not meaningful).
    dt, lead = d.pick([BF16, FP32]), d.lead(2)
    n = d.size(64, lo=32 if d.device == "cuda" else 1)
    shape = (*lead, n)
    if d.device == "cuda":  # rows away from s = 0, where the gate's slope blows up; eps 1e-6
        from test_gpu_engram_gate import EPS, _inputs  # (as its float64 reference assumes)

        h, k, v, w_h, w_k = _inputs(shape, dt, d.int(0, 2**16))
        eps = EPS
    else:  # weights (H,) or per branch (shape[-2:]), TileKernels' layout
        h, k, v = (d.randn(shape, dt) for _ in range(3))
        wshape = shape[-2:] if len(shape) >= 2 and d.flag() else (n,)
        w_h, w_k = (d.randn(wshape, dt, 0.3) + 1 for _ in range(2))
        eps = d.pick([1e-6, 0.0, 0.5])
    args = {"h": h, "k": k, "v": v, "w_h": w_h, "w_k": w_k, "eps": eps}
    if d.device != "cuda" and d.flag():  # on the GPU the references use the default (1e-6)
        args["clamp_value"] = d.pick([0.0, 1e-6, 0.5])
    return dt, lead, shape, args


_ENGRAM_BAD = {"eps": BAD_EPS, "clamp_value": BAD_EPS}


def _true_statistics(args: dict) -> tuple:
    """The forward's (dot, g, rstd_h, rstd_k) in float64, stored as float32."""
    from kernels_py.engram import engram_gate

    inputs = [args[name].double() for name in ("h", "k", "v", "w_h", "w_k")]
    stats = engram_gate.statistics(*inputs, args["eps"], args.get("clamp_value", 1e-6))[1:]
    return tuple(x.float().contiguous() for x in stats)


def _engram_slots(c: Call, dt: Any, shape: tuple) -> None:
    for name in ("h", "k"):
        c.slot((name,), name, (dt,), every(shape))
    # v may also be shared by the rows of shape[-2] (size 1 there): that dim is not bound.
    c.slot(("v",), "v", (dt,), tuple(i for i in every(shape) if i != len(shape) - 2))
    for name in ("w_h", "w_k"):
        c.slot((name,), name, (dt,), every(c.args[name].shape))


def engram_gate(d: Draw) -> Call:
    dt, lead, shape, args = _engram_inputs(d)
    gate = d.flag()
    args["return_gate"] = gate
    returns = [(shape, dt)] + ([(lead, FP32)] if gate else [])
    c = Call(args, returns, math.prod(lead) > 0, bad=_ENGRAM_BAD)
    if gate and d.flag():
        d.outs(c, [("out[0] (out)", shape, dt), ("out[1] (g)", lead, FP32)])
    else:
        d.outs(c, [("out", shape, dt)], pair=False)
    _engram_slots(c, dt, shape)

    def check(result: Any) -> None:  # tolerances of tests/test_gpu_engram_gate.py
        out, g = _ref("engram.engram_gate")(
            *(args[n] for n in ("h", "k", "v", "w_h", "w_k")), args["eps"]
        )
        rtol, atol = {BF16: (1.6e-2, 1e-2), FP32: (1e-5, 1e-5)}[dt]
        _close(result[0] if gate else result, out, rtol, atol)
        if gate:
            _close(result[1], g, 1e-5, 1e-6)

    c.check = check
    return c


def engram_gate_backward(d: Draw) -> Call:
    dt, lead, shape, args = _engram_inputs(d)
    args = {"grad_out": d.randn(shape, dt), **args}
    # The forward's saved (dot, g, rstd_h, rstd_k): on the GPU the values are checked, so pass
    # the real ones (random ones are a different backward); on the CPU only shapes and refusals
    # matter. Always given: saved=None launches the saving forward first.
    if d.device != "cuda":
        args["saved"] = tuple(d.randn(lead, FP32) for _ in range(4))
    else:
        args["saved"] = _true_statistics(args)
    wshape = args["w_h"].shape
    specs = [(f"out[{i}] (grad_{name})", shape, dt) for i, name in enumerate("hkv")]
    specs += [("out[3] (grad_w_h)", wshape, FP32), ("out[4] (grad_w_k)", wshape, FP32)]
    c = Call(args, [(s, dtype) for _, s, dtype in specs], math.prod(lead) > 0, bad=_ENGRAM_BAD)
    d.outs(c, specs)
    c.slot(("grad_out",), "grad_out", (dt,), every(shape))
    _engram_slots(c, dt, shape)
    for i, name in enumerate(("dot", "g", "rstd_h", "rstd_k")):
        c.slot(("saved", i), f"saved[{i}] ({name})", (FP32,), every(lead))

    def check(result: Any) -> None:
        from test_gpu_engram_gate import _check_grads, _grads64

        inputs = [args[name] for name in ("h", "k", "v", "w_h", "w_k")]
        _check_grads(result, _grads64(args["grad_out"], *inputs), _short(dt), "fuzz")

    c.check = check
    return c


# Builders of ops that live in modules this checkout may not have yet.
NEEDS = {
    "cast_back_fp4": "tileaot._cast_back_fp4",
    "per_token_cast_fp4": "tileaot.per_token_cast_fp4",
}
# A builder's name is its public op and the op of its kernels, except:
PUBLIC_OP = {
    "cast_back_fp4": "cast_back",
    "cast_back_groups": "cast_back",
    "per_token_cast_fp8_groups": "per_token_cast_fp8",
}
NATIVE_OP = {
    "cast_back": "cast_back_fp8",
    "cast_back_groups": "cast_back_fp8",
    "per_token_cast_fp8_groups": "per_token_cast_fp8",
}

BUILDERS = {
    f.__name__: f
    for f in (
        rms_norm,
        gemm,
        swiglu,
        swiglu_per_token_cast_fp8,
        swiglu_per_channel_cast_and_transpose,
        per_token_cast_fp8,
        per_token_cast_fp8_groups,
        per_block_cast_fp8,
        per_block_cast_lossless,
        per_channel_cast_fp8,
        per_channel_cast_fused,
        per_channel_cast_and_transpose,
        per_token_cast_e5m6,
        cast_back,
        cast_back_groups,
        cast_back_fp4,
        cast_back_e5m6,
        per_token_cast_fp4,
        transpose,
        sinkhorn_normalize,
        sinkhorn_normalize_backward,
        expand_to_mhc,
        expand_to_mhc_backward,
        mhc_pre_apply_mix,
        mhc_pre_apply_mix_backward,
        mhc_post,
        mhc_post_backward,
        mhc_pre_split_mixes,
        mhc_head_compute_mix,
        mhc_pre_split_mixes_backward,
        mhc_head_compute_mix_backward,
        mhc_pre_norm_fn,
        mhc_pre_norm_fn_backward,
        topk_gate,
        top2_sum_gate,
        topk_sum_and_topk_group_idx,
        normalize_weight,
        mask_indices_by_tp,
        group_count,
        aux_fi,
        inplace_unique_group_indices,
        engram_hash,
        engram_fused_weight,
        engram_grad_w_reduce,
        moe_expand,
        expand_to_fused,
        expand_to_fused_with_sf,
        moe_reduce,
        swiglu_backward,
        engram_gate,
        engram_gate_backward,
    )
}
