"""CPU tests of the mHC kernels beyond sinkhorn (kernels_py/mhc): their lowering for every
default arch (TileLang on the CPU, no GPU), and the references against a plain loop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.mhc import expand_to_mhc as expand_fwd  # noqa: E402
from kernels_py.mhc import expand_to_mhc_backward as expand_bwd  # noqa: E402
from kernels_py.spec import DEFAULT_ARCHS  # noqa: E402


def test_expand_references_against_a_loop():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 24).to(torch.bfloat16)
    y = expand_fwd.reference(x, 3)
    for r in range(3):
        assert torch.equal(y[:, :, r], x)
    g = torch.randn(3, 4, 24).to(torch.bfloat16)
    acc = [[0.0] * 24 for _ in range(3)]
    for t in range(3):
        for r in range(4):
            for h in range(24):  # float32 sums in r order (float32 holds these exactly)
                acc[t][h] = float(torch.tensor(acc[t][h]) + g[t, r, h].float())
    assert torch.equal(expand_bwd.reference(g), torch.tensor(acc).to(torch.bfloat16))


@needs_tilelang
@pytest.mark.parametrize("arch", DEFAULT_ARCHS)
@pytest.mark.parametrize("module", [expand_fwd, expand_bwd], ids=["forward", "backward"])
def test_lower_expand_per_thread_with_16_byte_stores(module, arch):
    src = lower_source(module.factory(arch=arch, dtype="bfloat16"), arch, "mhc_expand_test")
    assert "tl::store_global_128(" in src and "__shared__" not in src
    assert "(H % 8) == 0" in src  # the runtime branch between vector and element accesses
