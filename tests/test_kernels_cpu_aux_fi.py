"""aux_fi on the CPU: our reference against TileKernels 1.0.0's (`tile_kernels.torch.aux_fi`),
bit for bit; the wrapper's checks and launch, and lowering.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.aux_fi")
op = importlib.import_module("tileaot.aux_fi").aux_fi

TOKENS = (0, 1, 7, 129, 4001)


@pytest.mark.parametrize("e", [1, 7, 64, 256, 384, 8192, 9000])
@pytest.mark.parametrize("k, a", [(1, 1), (6, 6), (8, 8), (9, 4), (8, 2**31 - 1)])
def test_reference_matches_tile_kernels_bit_for_bit(e, k, a):
    """count * E passes 2**24 (E = 9000, one expert: rounded) and T * A too (A = 2**31 - 1):
    both roundings are TileKernels' reference's."""
    ref = tk("moe").aux_fi
    for i, tokens in enumerate(TOKENS):
        gen = torch.Generator().manual_seed(i)
        x = torch.randint(-3, e, (tokens, k), generator=gen, dtype=torch.int32)
        if i == 2 or i == 4:
            x[:] = e - 1  # every entry on one expert
        ours = m.reference(x, e, a)
        assert ours.dtype == torch.float32 and ours.shape == (e,)
        want = ref(x.long(), e, a)  # its scatter_add takes int64 indices
        assert torch.equal(ours.view(torch.int32), want.view(torch.int32)), (e, k, a, tokens)


def test_reference_against_float64_counts():
    """An independent oracle: exact counts, then the float32 roundings written out."""
    x = torch.tensor([[0, -1, 3, 5], [3, 3, -7, 4], [2, 3, 0, 1]], dtype=torch.int32)
    counts = [2, 1, 1, 4]  # entry 5 >= E = 4 and the negatives are not counted
    f32 = torch.float32
    want = [
        float(torch.tensor(c * 4.0, dtype=f32) / torch.tensor(3.0 * 2, dtype=f32)) for c in counts
    ]
    assert m.reference(x, 4, 2).tolist() == want


def i32(*shape):
    return t(*shape, dtype=torch.int32)


def test_launch_arguments(fake, cpu_as_cuda):
    y = op(i32(5, 8), 256, 8)
    assert y.shape == (256,) and y.dtype == torch.float32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("aux_fi", "i32")
    assert launch.shapes == (5, 8, 256, 256) and launch.scalars == (8.0,)
    # No indices: zeros without a launch (as TileKernels' reference for no tokens)
    poisoned = torch.full((256,), float("nan"))
    assert op(i32(0, 8), 256, 8, out=poisoned) is poisoned and not poisoned.any()
    assert op(i32(5, 0), 256, 8).shape == (256,) and len(fake.launches) == 1
    assert op(i32(5, 8), 0, 8).shape == (0,) and len(fake.launches) == 1


E_RANGE = r"num_experts must be an int in \[0, 2\*\*31\)"
A_RANGE = r"num_aux_topk must be an int in \[1, 2\*\*31\)"
BAD = [
    (lambda: op(i32(3, 8), -1, 8), ValueError, E_RANGE + "; got -1$"),
    (lambda: op(i32(3, 8), 2**31, 8), ValueError, E_RANGE),
    (lambda: op(i32(3, 8), 8.0, 8), TypeError, r"num_experts must be an int, got float"),
    (lambda: op(i32(3, 8), 8, 0), ValueError, A_RANGE + "; got 0$"),
    (lambda: op(i32(3, 8), 8, 2**31), ValueError, A_RANGE),
    (lambda: op(i32(3, 8), 8, 2.0), TypeError, r"num_aux_topk must be an int, got float"),
    (lambda: op(t(3, 8, dtype=torch.int64), 8, 8), TypeError, r"topk_idx"),
    (lambda: op(i32(24), 8, 8), ValueError, r"topk_idx"),
    (lambda: op(i32(3, 8), 8, 8, out=t(7, dtype=torch.float32)), ValueError, r"out"),
    (lambda: op(i32(3, 8), 8, 8, out=i32(8)), TypeError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """One key, one variant (three kernels: zero, count, divide) on each default arch."""
    for arch, src in default_arch_sources(m.factory, "fi", dtype="int32"):
        assert "AtomicAdd" in src and "fi_kernel_2" in src and "__fdiv_rn" in src, arch
