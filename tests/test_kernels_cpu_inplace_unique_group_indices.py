"""inplace_unique_group_indices on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.inplace_unique_group_indices`, in place), bit for bit; the wrapper's checks
and launch, and lowering.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.inplace_unique_group_indices")
op = importlib.import_module("tileaot.inplace_unique_group_indices").inplace_unique_group_indices

TOKENS = (0, 1, 7, 129, 4001)


def _theirs(x, g):
    y = x.clone()
    assert tk("moe").inplace_unique_group_indices(y, g) is None  # in place
    return y


@pytest.mark.parametrize("g", [1, 4, 8, 64, 128])
@pytest.mark.parametrize("k", [1, 2, 4, 8, 9])
def test_reference_matches_tile_kernels_bit_for_bit(g, k):
    for i, tokens in enumerate(TOKENS):
        gen = torch.Generator().manual_seed(i)
        x = torch.randint(-3, g, (tokens, k), generator=gen, dtype=torch.int32)
        if i == 2:
            x[:] = g - 1  # every entry the same
        if i == 3:
            x[:] = -1  # all padding
        ours = m.reference(x, g)
        assert ours.dtype == torch.int32 and ours.shape == x.shape
        assert torch.equal(ours, _theirs(x, g)), (g, k, tokens)
        assert torch.equal(ours.long(), _theirs(x.long(), g)), (g, k, tokens)


def test_reference_against_a_loop():
    """An independent oracle: a Python set per row (negatives compared too, as TileKernels'
    reference: a repeated -5 becomes -1)."""
    rows = [[3, 1, 3, -1], [-1, -1, 2, 2], [-5, 0, -5, 7], [4, 4, 4, 4], [0, 1, 2, 3]]
    want = []
    for row in rows:
        seen: set[int] = set()
        want.append([-1 if v in seen or seen.add(v) else v for v in row])  # type: ignore[func-returns-value]
    assert m.reference(torch.tensor(rows, dtype=torch.int32)).tolist() == want
    assert want[2] == [-5, 0, -1, 7]


def i32(*shape):
    return t(*shape, dtype=torch.int32)


def test_launch_arguments(fake, cpu_as_cuda):
    x = i32(5, 4)
    y = op(x, 8)
    assert y.shape == (5, 4) and y.dtype == torch.int32 and y.data_ptr() != x.data_ptr()
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("inplace_unique_group_indices", "i32")
    assert launch.shapes == (5, 4, 5, 4) and launch.scalars == ()
    assert op(i32(0, 4), 8).shape == (0, 4) and len(fake.launches) == 1
    assert op(i32(5, 0), 8).shape == (5, 0) and len(fake.launches) == 1


BAD = [
    (lambda: op(i32(3, 4), -1), ValueError, r"num_groups must be an int in \[0, 2\*\*31\); got -1"),
    (lambda: op(i32(3, 4), 2**31), ValueError, r"num_groups must be an int in \[0, 2\*\*31\)"),
    (lambda: op(i32(3, 4), 8.0), TypeError, r"num_groups must be an int, got float"),
    (lambda: op(t(3, 4, dtype=torch.int64), 8), TypeError, r"group_indices"),
    (lambda: op(i32(12), 8), ValueError, r"group_indices"),
    (lambda: op(i32(3, 4), 8, out=i32(3, 5)), ValueError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


def test_out_overlapping_the_input_is_refused(fake, cpu_as_cuda):
    """The kernel reads each row while writing `out` (restrict pointers): no aliasing."""
    x = i32(3, 4)
    with pytest.raises(ValueError, match="overlap"):
        op(x, 8, out=x)
    assert fake.launches == []


@needs_tilelang
def test_lowers_for_every_default_arch():
    """One key, one variant (one kernel, a thread per row) on each default arch."""
    for arch, src in default_arch_sources(m.factory, "uq", dtype="int32"):
        assert "uq_kernel" in src and "-1" in src, arch
