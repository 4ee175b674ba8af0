"""mask_indices_by_tp on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.mask_indices_by_tp`), bit for bit, on int32 and int64 indices; the
wrapper's checks, and lowering.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.mask_indices_by_tp")
op = importlib.import_module("tileaot.mask_indices_by_tp").mask_indices_by_tp

TOKENS = (1, 7, 129, 4001)
# (n, num_ep_ranks, num_tp_ranks): DeepSeek-V3's 256 experts on 8/16/64 ranks, TP 1/2/4/8,
# expert counts that num_ep_ranks does not divide, one expert per rank.
CONFIGS = [
    (256, 8, 2),
    (256, 16, 4),
    (256, 64, 8),
    (256, 1, 1),
    (384, 8, 1),
    (160, 8, 4),
    (72, 5, 3),
    (7, 7, 7),
    (300, 3, 2),
]


def indices_for(tokens: int, k: int, n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, n, (tokens, k), generator=gen, dtype=torch.int32)
    flat = x.view(-1)
    edges = torch.tensor([-1, -7, 0, n - 1, n, n + 5, 2**31 - 1, -(2**31)], dtype=torch.int32)
    flat[: min(flat.numel(), edges.numel())] = edges[: flat.numel()]
    return x


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_reference_matches_tile_kernels_bit_for_bit(config):
    n, ep, tp = config
    ref = tk("moe").mask_indices_by_tp
    for i, tokens in enumerate(TOKENS):
        x = indices_for(tokens, 8 if i % 2 else 9, n, seed=i)
        for tp_rank in range(tp):
            ours = m.reference(x, n, ep, tp_rank, tp)
            assert ours.dtype == torch.int32
            assert torch.equal(ours, ref(x, n, ep, tp_rank, tp)), (config, tokens, tp_rank)
            if x.min() > -(2**31):  # int64: the same values (no wrap at -2**31 there)
                assert torch.equal(ours.long(), ref(x.long(), n, ep, tp_rank, tp))


def test_every_valid_index_lands_on_exactly_one_rank_once():
    """Over the TP ranks each index in [0, n) is kept by one rank, and each rank's kept indices
    are its local experts 0 .. (n // ep) * (ep // tp) - 1, each once."""
    n, ep, tp = 256, 8, 2
    x = torch.arange(n, dtype=torch.int32)[None]
    kept = [m.reference(x, n, ep, r, tp) for r in range(tp)]
    assert torch.equal(sum((k >= 0).int() for k in kept), torch.ones_like(x))
    for k in kept:
        assert torch.equal(k[k >= 0].sort().values, torch.arange(n // tp, dtype=torch.int32))


def i32(*shape):
    return t(*shape, dtype=torch.int32)


def test_launch_arguments(fake, cpu_as_cuda):
    y = op(i32(5, 8), 256, 8, 1, 2)
    assert y.shape == (5, 8) and y.dtype == torch.int32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("mask_indices_by_tp", "i32")
    assert launch.shapes == (5, 8, 5, 8) and launch.scalars == (32.0, 64.0, 2.0, 1.0)
    assert op(i32(0, 8), 256, 8, 1, 2).shape == (0, 8) and len(fake.launches) == 1


BAD = [
    (lambda: op(i32(3, 8), 256, 0, 0, 1), ValueError, r"num_ep_ranks must be an int >= 1"),
    (lambda: op(i32(3, 8), 4, 8, 0, 1), ValueError, r"n must be in \[num_ep_ranks = 8, 2\*\*31\)"),
    (lambda: op(i32(3, 8), 256, 8, 2, 2), ValueError, r"tp_rank must be in \[0, num_tp_ranks"),
    (lambda: op(i32(3, 8), 256, 8, -1, 2), ValueError, r"tp_rank must be in"),
    (lambda: op(i32(3, 8), 256, 8, 0, 0), ValueError, r"num_tp_ranks must be >= 1"),
    (lambda: op(i32(3, 8), 256, 1, 0, 2**24), ValueError, r"num_tp_ranks must be >= 1 with"),
    (lambda: op(i32(3, 8), 256.0, 8, 0, 1), TypeError, r"n must be an int, got float"),
    (lambda: op(i32(3, 8), 256, 8, None, 1), TypeError, r"tp_rank must be an int"),
    (lambda: op(t(3, 8, dtype=torch.int64), 256, 8, 0, 1), TypeError, r"indices"),
    (lambda: op(i32(24), 256, 8, 0, 1), ValueError, r"indices"),
    (lambda: op(i32(3, 8), 256, 8, 0, 1, out=i32(3, 7)), ValueError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """One key, one variant: the generic kernel on each default arch."""
    for arch, src in default_arch_sources(m.factory, "mtp", dtype="int32"):
        assert "masked[" in src and "tp_rank" in src, arch
