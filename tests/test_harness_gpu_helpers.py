"""CPU tests of the GPU-test harness (tests/_gpu_helpers.py) against a fake torch.cuda.

The fake keeps a timeline of stream events; a "launch on the wrong stream" is modelled as a call
that reads what its input held before the side stream's writes landed (the poison). The
stream-order helper must pass a call that respects the caller's stream, fail one that does not,
and refuse a check that cannot tell the two apart; the cast harness's bit-exact comparison must
see one changed q byte and one changed scale bit.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import RowCast, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")


class _FakeCuda:
    """torch.cuda's stream calls as the helpers use them, recording what happens on which stream."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.current = "default"

    def Stream(self):  # noqa: N802 (torch's name)
        return _FakeStream(self)

    def stream(self, side):
        return _StreamContext(self, side)

    def _sleep(self, cycles):
        self.events.append(("sleep", self.current))

    def synchronize(self):
        self.events.append(("synchronize", self.current))


class _FakeStream:
    def __init__(self, cuda):
        self.cuda = cuda

    def synchronize(self):
        self.cuda.events.append(("side synchronize", self.cuda.current))


class _StreamContext:
    def __init__(self, cuda, side):
        self.cuda, self.side = cuda, side

    def __enter__(self):
        self.cuda.current = "side"
        return self.side

    def __exit__(self, *exc):
        self.cuda.current = "default"


@pytest.fixture
def cuda(monkeypatch):
    fake = _FakeCuda()
    for name in ("Stream", "stream", "_sleep", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    return fake


def _square(cuda):
    """An op y = x * x that records the stream it was launched on."""

    def call(x):
        cuda.events.append(("launch", cuda.current))
        return x * x

    return call


def test_a_launch_on_the_callers_stream_passes(cuda):
    src = torch.arange(1.0, 9.0)
    assert_ordered_on_callers_stream(_square(cuda), lambda y: torch.equal(y, src * src), src)
    control, launch = (
        cuda.events.index(("launch", "default")),
        cuda.events.index(("launch", "side")),
    )
    assert cuda.events[launch - 1] == ("sleep", "side") and cuda.events[-1][0] == "side synchronize"
    assert control < launch


def test_a_launch_on_another_stream_fails(cuda):
    src = torch.arange(1.0, 9.0)

    def stale(x):  # what a launch during the sleep reads: the twin before the copy, all NaN
        cuda.events.append(("launch", "other"))
        return torch.full_like(x, float("nan")) * x

    with pytest.raises(AssertionError, match="caller's stream"):
        assert_ordered_on_callers_stream(stale, lambda y: torch.equal(y, src * src), src)
    with pytest.raises(AssertionError):  # a check that asserts is reported as its own failure
        assert_ordered_on_callers_stream(
            stale, lambda y: torch.testing.assert_close(y, src * src), src
        )


def test_a_check_that_cannot_fail_is_refused(cuda):
    src = torch.arange(1.0, 9.0)
    with pytest.raises(AssertionError, match="also passes on the poisoned inputs"):
        assert_ordered_on_callers_stream(_square(cuda), lambda y: y.shape == src.shape, src)
    # A poison equal to the data cannot show the stream order either.
    with pytest.raises(AssertionError, match="also passes on the poisoned inputs"):
        assert_ordered_on_callers_stream(
            _square(cuda), lambda y: torch.equal(y, torch.ones(8)), torch.ones(8), poison=1.0
        )


def test_several_sources_get_their_own_poison(cuda):
    a, b = torch.arange(4.0), torch.arange(4, dtype=torch.int32) + 10
    seen = []

    def call(x, idx):
        seen.append((x.clone(), idx.clone()))
        return x + idx

    assert_ordered_on_callers_stream(
        call, lambda y: torch.equal(y, a + b), a, b, poison=(float("nan"), 3)
    )
    control, real = seen
    assert control[0].isnan().all() and (control[1] == 3).all()
    assert torch.equal(real[0], a) and torch.equal(real[1], b)
    with pytest.raises(AssertionError, match="one poison value per source"):
        assert_ordered_on_callers_stream(call, lambda y: True, a, b, poison=(0.0,))


def test_the_cast_harness_compares_bit_for_bit():
    cast = RowCast("per_channel_cast_fp8", lambda m, n: ((m, n), (-(-m // 128), n)), None)
    x = torch.randn(130, 40)
    q, scale = cast.reference(x, round_sf=True)
    assert cast.exact(q, scale, x, round_sf=True)
    q_bad = q.view(torch.uint8).clone()
    q_bad[129, 39] ^= 1
    assert cast.differences(q_bad, scale, x, True) == (True, 1)
    scale_bad = scale.clone()
    scale_bad.view(torch.int32)[1, 0] += 1  # one ulp
    assert cast.differences(q, scale_bad, x, True) == (False, 0)
    with pytest.raises(AssertionError, match="scales differ"):
        cast.assert_exact(q, scale_bad, x, True, "v")
    with pytest.raises(AssertionError, match="1 q bytes differ"):
        cast.assert_exact(q_bad, scale, x, True, "v")


def test_the_cast_stream_check_runs_the_op_on_the_callers_stream(cuda, monkeypatch):
    import tileaot

    cast = RowCast("per_channel_cast_fp8", lambda m, n: ((m, n), (-(-m // 128), n)), None)
    x = torch.randn(130, 40)
    monkeypatch.setattr(tileaot, cast.op, lambda t: cast.reference(t), raising=False)
    cast.check_stream_order(x)
    # An op launched on another stream: it reads the twin before the copy, all NaN.
    monkeypatch.setattr(
        tileaot, cast.op, lambda t: cast.reference(torch.full_like(t, float("nan"))), raising=False
    )
    with pytest.raises(AssertionError, match="caller's stream"):
        cast.check_stream_order(x)
