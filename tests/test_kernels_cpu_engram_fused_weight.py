"""engram_fused_weight on the CPU: the reference against the exact product (float64) and
against what TileKernels 1.0.0's gate computes with the two weights apart
(``tile_kernels.torch.engram.engram_gate_ref`` multiplies ``x * wh`` and ``k * we``; its
``fused_weight`` kernel is ``float(wh) * float(we)``, exact for bf16), the wrapper's launches
and checks, and lowering.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, misaligned, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.engram.engram_fused_weight")
op = importlib.import_module("tileaot.engram_fused_weight").engram_fused_weight
BF16, F32 = torch.bfloat16, torch.float32
SHAPES = ((4, 7168), (4, 4096), (1, 2048), (4, 7), (3, 1000))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_reference_is_the_exact_product(shape):
    """bf16 x bf16 has at most 16 significant bits: the float32 product is the float64 one,
    extremes of bf16's range included (no overflow below float32's max)."""
    g = torch.Generator().manual_seed(shape[1])
    w_h = (torch.randn(shape, generator=g) * 4).to(BF16)
    w_k = (torch.randn(shape, generator=g) * 4).to(BF16)
    w_h[0, 0], w_k[0, 0] = 2.0**60, 2.0**60  # 2**120, far below float32's max
    w_h[-1, -1], w_k[-1, -1] = 2.0**-60, -(2.0**-60)
    ours = m.reference(w_h, w_k)
    assert ours.dtype == F32 and ours.shape == shape
    exact = w_h.to(torch.float64) * w_k.to(torch.float64)
    assert torch.equal(ours.to(torch.float64), exact)


def test_fused_weight_reproduces_tile_kernels_gate_dot():
    """The raw dot TileKernels' reference saves, ``sum(x * wh * k * we)`` in float32, taken
    with the fused weight ``(x * k) * w``: within float32 summation error (the weight's
    product itself is exact)."""
    g = torch.Generator().manual_seed(3)
    x, k = (torch.randn(9, 4, 256, generator=g).to(BF16) for _ in "xk")
    v = torch.randn(9, 256, generator=g).to(BF16)
    w_h, w_k = (torch.randn(4, 256, generator=g).to(BF16) for _ in "hk")
    _, dot, *_ = tk("engram").engram_gate_ref(x, k, v, w_h, w_k, 1e-6, 1e-6, True)
    ours = (x.double() * k.double() * m.reference(w_h, w_k).double()).sum(-1)
    torch.testing.assert_close(dot.double(), ours, rtol=1e-5, atol=1e-5)


def test_launch_arguments(fake, cpu_as_cuda):
    w_h, w_k = t(4, 72), t(4, 72)
    w = op(w_h, w_k)
    assert w.shape == (4, 72) and w.dtype == F32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("engram_fused_weight", "bf16")
    check_launch(launch, "engram_fused_weight", w_h=w_h, w_k=w_k, w=w)
    out = torch.empty(4, 72, dtype=F32)
    assert op(w_h, w_k, out=out) is out
    assert fake.launches[-1].ptrs[-1] == out.data_ptr()


@pytest.mark.parametrize("shape", [(0, 72), (4, 0)])
def test_empty_launches_nothing(fake, cpu_as_cuda, shape):
    w = op(t(*shape), t(*shape))
    assert w.shape == shape and w.dtype == F32
    assert fake.launches == []


BAD = [
    ((t(4, 72, dtype=F32), t(4, 72)), {}, TypeError, r"w_h"),
    ((t(4, 72), t(4, 72, dtype=torch.float16)), {}, TypeError, r"w_k"),
    ((t(72), t(72)), {}, ValueError, r"w_h must have shape"),
    ((t(4, 72), t(4, 64)), {}, ValueError, r"w_k must have shape"),
    ((t(4, 72), t(2, 72)), {}, ValueError, r"w_k must have shape"),
    ((misaligned(4, 72), t(4, 72)), {}, ValueError, r"w_h"),
    ((t(4, 72), t(4, 72)), {"out": t(4, 72)}, TypeError, r"out"),
    ((t(4, 72), t(4, 72)), {"out": t(4, 64, dtype=F32)}, ValueError, r"out"),
    (("w", t(4, 72)), {}, TypeError, r"w_h"),
]


@pytest.mark.parametrize("args, kwargs, exc, message", BAD)
def test_bad_calls_raise_one_line_before_any_launch(args, kwargs, exc, message, fake, cpu_as_cuda):
    with pytest.raises(exc, match=message) as info:
        op(*args, **kwargs)
    assert "\n" not in str(info.value)
    assert fake.launches == []


@needs_tilelang
def test_lowers_for_every_default_arch():
    """16-byte bf16 loads and float32 stores (never a 32-byte vector) on every default arch."""
    for arch, src in default_arch_sources(m.factory, "efw", dtype="bfloat16"):
        assert "*(uint4*)(w_h + " in src and "*(float4*)(w + " in src, arch
        assert "float8" not in src and "longlong4" not in src and "ulonglong4" not in src, arch
