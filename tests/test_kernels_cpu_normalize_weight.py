"""normalize_weight on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.normalize_weight`), bit for bit (its own test compares its kernel with that
reference by `assert_equal`, both outputs), the wrapper's checks, and lowering.
"""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.normalize_weight")
op = importlib.import_module("tileaot.normalize_weight").normalize_weight

TOKENS = (1, 7, 129, 4001)


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)  # NaN payloads and -0.0 compared too


def weights_for(tokens: int, k: int, kind: str, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(tokens, k, generator=gen)  # TileKernels' test: torch.rand
    if kind == "randn":  # signed: sums cancel
        w = torch.randn(tokens, k, generator=gen)
    elif kind == "zeros":  # the 1e-20 floor: 0 / 1e-20 = 0
        w.zero_()
        w[::3] = -0.0
    elif kind == "tiny":  # subnormal weights, next to the floor
        w = w * 1e-38
    elif kind == "specials":
        pick = torch.rand(tokens, k, generator=gen)
        w[pick < 0.05] = math.inf
        w[(pick >= 0.05) & (pick < 0.1)] = -math.inf
        w[(pick >= 0.1) & (pick < 0.13)] = math.nan
        w[(pick >= 0.13) & (pick < 0.2)] = 3e38  # sums overflow
    return w


@pytest.mark.parametrize("k", [1, 2, 6, 8, 9, 16, 32])
@pytest.mark.parametrize("kind", ["rand", "randn", "zeros", "tiny", "specials"])
def test_reference_matches_tile_kernels_bit_for_bit(k, kind):
    ref = tk("moe").normalize_weight
    for i, tokens in enumerate(TOKENS):
        w = weights_for(tokens, k, kind, seed=i)
        den, nw = m.reference(w)
        tden, tnw = ref(w)
        assert den.dtype == nw.dtype == torch.float32
        assert den.shape == (tokens,) and nw.shape == (tokens, k)
        assert torch.equal(bits(den), bits(tden)), (k, kind, tokens)
        assert torch.equal(bits(nw), bits(tnw)), (k, kind, tokens)


def test_reference_sums_left_to_right_from_the_floor():
    """(1e-20 + 1) + -1 = 0 (the floor is lost in 1 + 1e-20): the order shows."""
    w = torch.tensor([[1.0, -1.0, 1e-30]])
    den, nw = m.reference(w)
    tiny = torch.tensor(1e-30)
    assert torch.equal(den, tiny[None]) and torch.equal(nw, w / tiny)
    den, nw = m.reference(torch.zeros(2, 3))
    assert torch.equal(den, torch.full((2,), 1e-20)) and torch.equal(nw, torch.zeros(2, 3))


def f(*shape):
    return t(*shape, dtype=torch.float32)


def test_launch_arguments(fake, cpu_as_cuda):
    den, nw = op(f(5, 8))
    assert den.shape == (5,) and nw.shape == (5, 8) and den.dtype == nw.dtype == torch.float32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("normalize_weight", "fp32")
    assert launch.shapes == (5, 8, 5, 5, 8) and launch.scalars == ()
    den, nw = op(f(0, 8))
    assert den.shape == (0,) and nw.shape == (0, 8) and len(fake.launches) == 1


BAD = [
    (lambda: op(t(3, 8)), TypeError, r"topk_weights"),
    (lambda: op(f(3, 8, 2)), ValueError, r"topk_weights"),
    (lambda: op(f(8)), ValueError, r"topk_weights"),
    (lambda: op(f(3, 8), out=(f(3), f(3, 7))), ValueError, r"out\[1\]|normalized_weights"),
    (lambda: op(f(3, 8), out=(f(4), f(3, 8))), ValueError, r"out\[0\]|denominator"),
    (lambda: op(f(3, 8), out=f(3, 8)), TypeError, r"out"),
    (lambda: op(f(3, 0)), ValueError, r"topk_weights has shape \(3, 0\): no weights to normalise"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """One key: the generic kernel on each default arch (IEEE adds and divides)."""
    for arch, src in default_arch_sources(m.factory, "nw", dtype="float32"):
        assert "__fdiv_rn" in src and "__fadd_rn" in src, arch


@needs_tilelang
@pytest.mark.parametrize("k", [*m.STATIC_K, 6, 3])
def test_static_k_moves_the_row_in_16_byte_vectors(k):
    """A static K reads and writes the row as float4 where 4 divides K (float2 / float for
    the others), with the generic kernel's IEEE adds and divides."""
    width = "float4" if k % 4 == 0 else "float2" if k % 2 == 0 else None
    for arch, src in default_arch_sources(m.factory, f"nwk{k}", dtype="float32", K=k):
        assert "__fdiv_rn" in src and "__fadd_rn" in src, arch
        assert (f"*({width}*)(topk_weights" in src) if width else ("float4" not in src), arch


def test_static_k_out_of_range_is_refused():
    with pytest.raises(ValueError, match="static K must be"):
        m.factory("90a", "float32", K=m.MAX_STATIC_K + 1)
