"""group_count on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.group_count`), bit for bit, on int32 and int64 indices; the wrapper's
checks, and lowering.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.group_count")
op = importlib.import_module("tileaot.group_count").group_count

TOKENS = (0, 1, 7, 129, 4001)


@pytest.mark.parametrize("g", [1, 7, 64, 256, 384, 8192, 9000])
@pytest.mark.parametrize("k", [1, 6, 8, 9])
def test_reference_matches_tile_kernels_bit_for_bit(g, k):
    ref = tk("moe").group_count
    for i, tokens in enumerate(TOKENS):
        gen = torch.Generator().manual_seed(i)
        x = torch.randint(-3, g, (tokens, k), generator=gen, dtype=torch.int32)
        if i == 2:
            x[:] = g - 1  # every entry in one group
        ours = m.reference(x, g)
        assert ours.dtype == torch.int32 and ours.shape == (g,)
        assert torch.equal(ours, ref(x, g)), (g, k, tokens)
        assert torch.equal(ours, ref(x.long(), g)), (g, k, tokens)


def test_reference_skips_negatives_and_entries_past_the_groups():
    """TileKernels' reference raises on an entry >= G (its kernel asserts); ours skips it."""
    x = torch.tensor([[0, -1, 3, 5], [3, 3, -7, 4]], dtype=torch.int32)
    assert m.reference(x, 4).tolist() == [1, 0, 0, 3]


def i32(*shape):
    return t(*shape, dtype=torch.int32)


def test_launch_arguments(fake, cpu_as_cuda):
    y = op(i32(5, 8), 256)
    assert y.shape == (256,) and y.dtype == torch.int32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("group_count", "i32")
    assert launch.shapes == (5, 8, 256) and launch.scalars == ()
    # No indices: zeros without a launch (an empty tensor has no data pointer to pass;
    # the runtime refuses NULL, H200 2026-12-02).
    poisoned = torch.full((256,), 7, dtype=torch.int32)
    assert op(i32(0, 8), 256, out=poisoned) is poisoned and not poisoned.any()
    assert len(fake.launches) == 1
    assert op(i32(5, 8), 0).shape == (0,) and len(fake.launches) == 1


BAD = [
    (lambda: op(i32(3, 8), -1), ValueError, r"num_groups must be an int in \[0, 2\*\*31\); got -1"),
    (lambda: op(i32(3, 8), 2**31), ValueError, r"num_groups must be an int in \[0, 2\*\*31\)"),
    (lambda: op(i32(3, 8), 8.0), TypeError, r"num_groups must be an int, got float"),
    (lambda: op(t(3, 8, dtype=torch.int64), 8), TypeError, r"group_idx"),
    (lambda: op(i32(24), 8), ValueError, r"group_idx"),
    (lambda: op(i32(3, 8), 8, out=i32(7)), ValueError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """One key, one variant (two kernels: zero, then count) on each default arch."""
    for arch, src in default_arch_sources(m.factory, "gc", dtype="int32"):
        assert "AtomicAdd" in src and "gc_kernel_1" in src, arch
