"""CPU tests of the engram_gate / engram_gate_backward Python layer: validation before any
launch, launch arguments, empty inputs, `out=`, the autograd Function. No GPU and no native
module (tests/_fakes.py: a recording fake `_C`, CPU tensors counted as CUDA)."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from _fakes import (  # noqa: E402, F401
    STREAM,
    Launch,
    cpu_as_cuda,
    fake,
    meta,
    misaligned,
    new_empty_calls,
    refusals_test,
    t,
    tileaot,
)
from _kernel_args import pointer  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

BF16, F32 = torch.bfloat16, torch.float32
# From the modules: the package exports them once python/tileaot/__init__.py imports them.
fwd_mod = importlib.import_module("tileaot.engram_gate")
bwd_mod = importlib.import_module("tileaot.engram_gate_backward")
gate, gate_bwd = fwd_mod.engram_gate, bwd_mod.engram_gate_backward
SMS = 132


@pytest.fixture(autouse=True)
def _sms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwd_mod, "_sm_count", lambda device: SMS)


def ins(*shape: int, dtype: torch.dtype = BF16) -> tuple[torch.Tensor, ...]:
    """(h, k, v, w_h, w_k) for rows of shape[-1]."""
    n = shape[-1]
    return t(*shape, dtype=dtype), t(*shape, dtype=dtype), t(*shape, dtype=dtype), \
        t(n, dtype=dtype), t(n, dtype=dtype)  # fmt: skip


def with_(i: int, x: torch.Tensor, *shape: int) -> tuple[torch.Tensor, ...]:
    args = list(ins(*shape))
    args[i] = x
    return tuple(args)


def overlapping_grads(m: int, n: int) -> tuple[torch.Tensor, ...]:
    buf = torch.zeros(m * n, dtype=BF16)
    return buf.view(m, n), buf.view(m, n), t(m, n), t(n, dtype=F32), t(n, dtype=F32)


def stats(*shape: int) -> tuple[torch.Tensor, ...]:
    """A forward's saved (dot, g, rstd_h, rstd_k) for h of `shape` (float32, h's rows)."""
    return tuple(t(*shape[:-1], dtype=F32) for _ in range(4))


def wgrads(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """out= weight gradients for (H,) weights: float32, as the backward writes them."""
    return t(n, dtype=F32), t(n, dtype=F32)


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    # forward
    ("f-h-list", lambda: gate([[1.0]], *ins(1, 1)[1:]), TypeError, r"h must be a torch\.Tensor"),
    (
        "f-h-fp16",
        lambda: gate(*ins(4, 64, dtype=torch.float16)),
        TypeError,
        r"h has dtype torch\.float16; supported dtypes: torch\.bfloat16, torch\.float32$",
    ),
    (
        "f-k-dtype",
        lambda: gate(*with_(1, t(4, 64, dtype=F32), 4, 64)),
        TypeError,
        r"k has dtype torch\.float32; it must match h \(torch\.bfloat16\)",
    ),
    ("f-v-none", lambda: gate(*with_(2, None, 4, 64)), TypeError, r"v must be a torch\.Tensor"),
    (
        "f-wk-dtype",
        lambda: gate(*with_(4, t(64, dtype=F32), 4, 64)),
        TypeError,
        r"w_k has dtype torch\.float32; it must match h",
    ),
    ("f-h-0d", lambda: gate(t(), t(), t(), t(1), t(1)), ValueError, r"0-d"),
    ("f-h-H0", lambda: gate(*ins(4, 0)), ValueError, r"H \(the last dim\) must be >= 1"),
    (
        "f-k-shape",
        lambda: gate(*with_(1, t(4, 32), 4, 64)),
        ValueError,
        r"k must have the shape of h \(4, 64\); got \(4, 32\)",
    ),
    (
        "f-v-shape-3d",
        lambda: gate(*with_(2, t(4, 64), 2, 2, 64)),
        ValueError,
        r"v must have the shape of h \(2, 2, 64\)",
    ),
    (
        "f-wh-shape",
        lambda: gate(*with_(3, t(1, 64), 4, 64)),
        ValueError,
        r"w_h must have shape \(4, 64\) \(one row per branch\) or \(64,\) to match h "
        r"\(4, 64\); got \(1, 64\)",
    ),
    (
        "f-wh-branches",
        lambda: gate(*with_(3, t(3, 64), 2, 4, 64)),
        ValueError,
        r"w_h must have shape \(4, 64\) \(one row per branch\) or \(64,\) to match h "
        r"\(2, 4, 64\); got \(3, 64\)",
    ),
    (
        "f-wk-not-wh",
        lambda: gate(*with_(4, t(4, 64), 2, 4, 64)),
        ValueError,
        r"w_k must have the shape of w_h \(64,\); got \(4, 64\)",
    ),
    (
        "f-clamp-neg",
        lambda: gate(*ins(4, 64), 1e-6, -1.0),
        ValueError,
        r"clamp_value must be finite and >= 0",
    ),
    ("f-clamp-str", lambda: gate(*ins(4, 64), 1e-6, "0"), TypeError, r"clamp_value must be a real"),
    (
        "b-clamp-nan",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), clamp_value=math.nan),
        ValueError,
        r"clamp_value must be finite",
    ),
    ("f-h-strided", lambda: gate(*with_(0, t(64, 4).t(), 4, 64)), ValueError, r"h is not contig"),
    (
        "f-v-shared-wrong-rows",
        lambda: gate(*with_(2, t(2, 2, 64), 2, 4, 64)),
        ValueError,
        r"v must have the shape of h \(2, 4, 64\) or \(2, 1, 64\) \(one row shared by the 4 "
        r"rows of h\.shape\[-2\]\); got \(2, 2, 64\)",
    ),
    (
        "f-v-flat-token-rows",  # [T, H] does not broadcast against [T, G, H]
        lambda: gate(*with_(2, t(2, 64), 2, 4, 64)),
        ValueError,
        r"v must have the shape of h \(2, 4, 64\) or \(2, 1, 64\)",
    ),
    (
        "f-v-1d-h",
        lambda: gate(*with_(2, t(1), 64)),
        ValueError,
        r"v must have the shape of h \(64,\); got \(1,\)",
    ),
    (
        "f-v-misaligned",
        lambda: gate(*with_(2, misaligned(4, 64), 4, 64)),
        ValueError,
        r"v's data pointer 0x[0-9a-f]+ is not 16-byte aligned",
    ),
    ("f-wk-misaligned", lambda: gate(*with_(4, misaligned(64), 4, 64)), ValueError, r"w_k's"),
    ("f-devices", lambda: gate(*with_(1, meta(4, 64), 4, 64)), ValueError, r"same CUDA device"),
    (
        "f-int32",
        lambda: gate(
            meta(2**17, 2**14), meta(2**17, 2**14), meta(2**17, 2**14), meta(2**14), meta(2**14)
        ),
        ValueError,
        r"below 2\*\*31",
    ),  # fmt: skip
    ("f-eps-str", lambda: gate(*ins(4, 64), "1e-6"), TypeError, r"eps must be a real number"),
    ("f-eps-neg", lambda: gate(*ins(4, 64), -1e-6), ValueError, r"eps must be finite and >= 0"),
    ("f-eps-nan", lambda: gate(*ins(4, 64), float("nan")), ValueError, r"eps must be finite"),
    ("f-out-list", lambda: gate(*ins(4, 64), out=[0]), TypeError, r"out must be a torch\.Tensor"),
    (
        "f-out-dtype",
        lambda: gate(*ins(4, 64), out=t(4, 64, dtype=F32)),
        TypeError,
        r"out has dtype torch\.float32; this call writes torch\.bfloat16",
    ),
    (
        "f-out-shape",
        lambda: gate(*ins(2, 2, 64), out=t(4, 64)),
        ValueError,
        r"out has shape \(4, 64\); this call writes \(2, 2, 64\)",
    ),
    (
        "f-out-is-v",
        lambda: (x := ins(4, 64), gate(*x, out=x[2])),
        ValueError,
        r"out overlaps v in memory",
    ),
    ("f-out-strided", lambda: gate(*ins(4, 64), out=t(64, 4).t()), ValueError, r"out is not"),
    (
        "f-out-pair-without-gate",
        lambda: gate(*ins(4, 64), out=(t(4, 64), t(4, dtype=F32))),
        TypeError,
        r"out must be a torch\.Tensor, got tuple",
    ),
    (
        "f-out-pair-len",
        lambda: gate(*ins(4, 64), return_gate=True, out=(t(4, 64),)),
        TypeError,
        r"out must be a \(out, g\) tuple of tensors; got a tuple of 1",  # the schema's message
    ),
    (
        "f-out-gate-dtype",
        lambda: gate(*ins(4, 64), return_gate=True, out=(t(4, 64), t(4))),
        TypeError,
        r"out\[1\] \(g\) has dtype torch\.bfloat16; this call writes torch\.float32",
    ),
    (
        "f-out-gate-shape",
        lambda: gate(*ins(2, 2, 64), return_gate=True, out=(t(2, 2, 64), t(4, dtype=F32))),
        ValueError,
        r"out\[1\] \(g\) has shape \(4,\); this call writes \(2, 2\)",
    ),
    # backward
    (
        "b-go-dtype",
        lambda: gate_bwd(t(4, 64, dtype=F32), *ins(4, 64)),
        TypeError,
        r"grad_out has dtype torch\.float32; it must match h \(torch\.bfloat16\)",
    ),
    ("b-go-none", lambda: gate_bwd(None, *ins(4, 64)), TypeError, r"grad_out must be a torch"),
    (
        "b-h-fp16",
        lambda: gate_bwd(t(4, 64, dtype=torch.float16), *ins(4, 64, dtype=torch.float16)),
        TypeError,
        r"h has dtype torch\.float16; supported",
    ),
    (
        "b-go-shape",
        lambda: gate_bwd(t(4, 32), *ins(4, 64)),
        ValueError,
        r"grad_out must have the shape of h \(4, 64\); got \(4, 32\)",
    ),
    ("b-k-shape", lambda: gate_bwd(t(4, 64), *with_(1, t(3, 64), 4, 64)), ValueError, r"k must"),
    ("b-H0", lambda: gate_bwd(t(4, 0), *ins(4, 0)), ValueError, r"H \(the last dim\)"),
    (
        "b-go-misaligned",
        lambda: gate_bwd(misaligned(4, 64), *ins(4, 64)),
        ValueError,
        r"grad_out's data pointer",
    ),
    ("b-go-strided", lambda: gate_bwd(t(64, 4).t(), *ins(4, 64)), ValueError, r"grad_out is not"),
    ("b-go-device", lambda: gate_bwd(meta(4, 64), *ins(4, 64)), ValueError, r"same CUDA device"),
    ("b-eps-bool", lambda: gate_bwd(t(4, 64), *ins(4, 64), True), TypeError, r"eps must be a"),
    (
        "b-saved-dtype",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), 1e-6, (t(4, dtype=F32), t(4), *stats(4, 64)[2:])),
        TypeError,
        r"saved\[1\] \(g\) has dtype torch\.bfloat16; the forward saves it as float32",
    ),
    (
        "b-saved-shape",
        lambda: gate_bwd(t(2, 2, 64), *ins(2, 2, 64), 1e-6, stats(4, 64)),
        ValueError,
        r"saved\[0\] \(dot\) must have shape \(2, 2\) \(h's shape without H\); got \(4,\)",
    ),
    (
        "b-saved-len",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), 1e-6, stats(4, 64)[:3]),
        TypeError,
        r"saved must be the forward's \(dot, g, rstd_h, rstd_k\).*; got tuple of length 3",
    ),
    (
        "b-saved-tensor",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), 1e-6, t(4, dtype=F32)),
        TypeError,
        r"saved must be the forward's .*; got Tensor",
    ),
    (
        "b-saved-list",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), 1e-6, [0.5] * 4),
        TypeError,
        r"saved\[0\] \(dot\) must be a",
    ),
    (
        "b-out-shared-v-grad-shape",
        lambda: gate_bwd(
            t(2, 4, 64),
            *with_(2, t(2, 1, 64), 2, 4, 64),
            out=(t(2, 4, 64), t(2, 4, 64), t(2, 4, 64), *wgrads(64)),
        ),
        ValueError,
        r"out\[2\] \(grad_v\) has shape \(2, 4, 64\); this call writes \(2, 1, 64\)",
    ),  # fmt: skip
    (
        "b-out-len",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), out=(t(4, 64),) * 3),
        TypeError,
        r"out must be a \(grad_h, grad_k, grad_v, grad_w_h, grad_w_k\) tuple of tensors; got a "
        r"tuple of 3",  # the schema's message
    ),
    (
        "b-out-wgrad-shape",
        lambda: gate_bwd(
            t(4, 64),
            *ins(4, 64),
            out=(t(4, 64), t(4, 64), t(4, 64), t(64, dtype=F32), t(32, dtype=F32)),
        ),
        ValueError,
        r"out\[4\] \(grad_w_k\) has shape \(32,\); this call writes \(64,\)",
    ),
    (
        "b-out-dtype",
        lambda: gate_bwd(
            t(4, 64), *ins(4, 64), out=(t(4, 64), t(4, 64, dtype=F32), t(4, 64), *wgrads(64))
        ),
        TypeError,
        r"out\[1\] \(grad_k\) has dtype torch\.float32",
    ),  # fmt: skip
    (
        "b-out-wgrad-dtype",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), out=(t(4, 64), t(4, 64), t(4, 64), t(64), t(64))),
        TypeError,
        r"out\[3\] \(grad_w_h\) has dtype torch\.bfloat16",
    ),
    (
        "b-out-overlap",
        lambda: gate_bwd(t(4, 64), *ins(4, 64), out=overlapping_grads(4, 64)),
        ValueError,
        r"out\[0\] \(grad_h\) overlaps out\[1\] \(grad_k\)",
    ),
    (
        "b-out-is-h",
        lambda: (
            x := ins(4, 64),
            gate_bwd(t(4, 64), *x, out=(x[0], t(4, 64), t(4, 64), *wgrads(64))),
        ),
        ValueError,
        r"out\[0\] \(grad_h\) overlaps h",
    ),  # fmt: skip
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


@pytest.mark.parametrize(
    "call",
    [lambda: gate(*ins(4, 64)), lambda: gate_bwd(t(4, 64), *ins(4, 64))],
    ids=["forward", "backward"],
)
def test_cpu_tensors_are_rejected(fake, call):
    with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
        call()
    assert fake.launches == []


# --- forward --------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "key"), [((5, 64), "bf16"), ((3, 4, 7168), "fp32")])
def test_forward_launch_arguments(fake, cpu_as_cuda, shape, key):
    dtype = {"bf16": BF16, "fp32": F32}[key]
    h, k, v, w_h, w_k = ins(*shape, dtype=dtype)
    out, g = gate(h, k, v, w_h, w_k, 1e-5, return_gate=True)
    assert (out.shape, out.dtype) == (h.shape, dtype)
    assert (g.shape, g.dtype) == (h.shape[:-1], F32)
    m, n = h.numel() // shape[-1], shape[-1]
    assert fake.lookups == [("engram_gate", key)]
    ptrs = tuple(x.data_ptr() for x in (h, k, v, w_h, w_k, out, g))
    shapes = (m, n, m, n, m, n, 1, n, 1, n, m, n, m)  # (H,) weights: one shared row
    assert fake.launches == [Launch(1001, 0, STREAM, ptrs, shapes, (1e-5, 1e-6))]


def test_forward_per_branch_weights_and_clamp(fake, cpu_as_cuda):
    h, k, v, _, _ = ins(3, 4, 64)
    w_h, w_k = t(4, 64), t(4, 64)
    gate(h, k, v, w_h, w_k, 1e-5, 0.25)
    (launch,) = fake.launches
    assert launch.ptrs[3:5] == (w_h.data_ptr(), w_k.data_ptr())
    assert launch.shapes == (12, 64, 12, 64, 12, 64, 4, 64, 4, 64, 12, 64, 12)
    assert launch.scalars == (1e-5, 0.25) and [type(x) for x in launch.scalars] == [float] * 2


@pytest.mark.parametrize(("shape", "v_shape"), [((3, 4, 64), (3, 1, 64)), ((5, 64), (1, 64))])
def test_forward_shared_value_passes_its_rows(fake, cpu_as_cuda, shape, v_shape):
    h, k, _, w_h, w_k = ins(*shape)
    v = t(*v_shape)
    out = gate(h, k, v, w_h, w_k)
    assert out.shape == h.shape
    m, n, mv = h.numel() // shape[-1], shape[-1], v.numel() // shape[-1]
    assert fake.launches[0].ptrs[2] == v.data_ptr()
    assert fake.launches[0].shapes == (m, n, m, n, mv, n, 1, n, 1, n, m, n, m)


def test_forward_out_and_default_return(fake, cpu_as_cuda):
    x = ins(2, 3, 128)
    y = t(2, 3, 128)
    assert gate(*x, out=y) is y
    assert fake.launches[0].ptrs[5] == y.data_ptr()
    assert isinstance(gate(*x), torch.Tensor)  # no gate unless asked for
    assert fake.launches[1].scalars == (1e-6, 1e-6)  # eps, clamp_value: TileKernels' 1e-6


def test_forward_out_pair(fake, cpu_as_cuda):
    x = ins(2, 3, 128, dtype=F32)
    pair = (t(2, 3, 128, dtype=F32), t(2, 3, dtype=F32))
    out, g = gate(*x, return_gate=True, out=pair)
    assert out is pair[0] and g is pair[1]
    assert fake.launches[0].ptrs[5:] == (pair[0].data_ptr(), pair[1].data_ptr())
    assert fake.lookups == [("engram_gate", "fp32")]


@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64)])
def test_forward_without_rows_does_not_launch(fake, cpu_as_cuda, shape):
    out, g = gate(*ins(*shape), return_gate=True)
    assert out.shape == shape and g.shape == shape[:-1]
    assert fake.launches == [] and fake.lookups == []


# --- backward -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "key", "blocks"),
    [
        ((4096, 7168), "bf16", SMS * 3),
        ((8, 4, 2048), "bf16", 32),  # fewer rows than SMS * 4: one block per row
        ((1000, 4096), "fp32", SMS * 2),
        ((600, 1000), "bf16", SMS * 4),  # the generic variant
    ],
)
def test_backward_launch_arguments(fake, cpu_as_cuda, shape, key, blocks, monkeypatch):
    dtype = {"bf16": BF16, "fp32": F32}[key]
    made = new_empty_calls(monkeypatch)
    x = ins(*shape, dtype=dtype)
    go = t(*shape, dtype=dtype)
    saved = stats(*shape)
    grads = gate_bwd(go, *x, 1e-5, saved)
    partial = made[-1]  # the scratch's workspace, allocated after the weight grads
    assert (partial.numel(), partial.dtype) == (blocks * shape[-1] * 4, torch.uint8)  # fp32
    assert [g.shape for g in grads] == [go.shape] * 3 + [(shape[-1],)] * 2
    assert [g.dtype for g in grads] == [dtype] * 3 + [F32] * 2  # weight grads: fp32, as TK
    m, n = go.numel() // shape[-1], shape[-1]
    assert fake.lookups == [("engram_gate_backward", key)]
    ptrs = tuple(a.data_ptr() for a in (go, *x, *saved, *grads, partial))
    flat = (m, n, m, n, m, n, m, n, 1, n, 1, n, m, m, m, m, m, n, m, n, m, n, 1, n, 1, n, blocks, n)
    assert fake.launches == [Launch(1001, 0, STREAM, ptrs, flat, (1e-6,))]  # clamp only


def test_backward_without_saved_runs_the_saving_forward_first(fake, cpu_as_cuda):
    """saved=None: engram_gate_save computes the statistics (with eps), then the backward
    reads exactly those tensors."""
    x = ins(4, 64)
    gate_bwd(t(4, 64), *x, 1e-5, clamp_value=0.25)
    assert fake.lookups == [("engram_gate_save", "bf16"), ("engram_gate_backward", "bf16")]
    fwd_launch, bwd_launch = fake.launches
    assert fwd_launch.scalars == (1e-5, 0.25) and bwd_launch.scalars == (0.25,)
    read = [
        pointer(bwd_launch, "engram_gate_backward", n) for n in ("dot", "gate", "rstd_h", "rstd_k")
    ]
    assert read == [
        pointer(fwd_launch, "engram_gate_save", n) for n in ("dot", "g", "rstd_h", "rstd_k")
    ]


@pytest.mark.parametrize(("tokens", "blocks"), [(1000, SMS * 4), (5, 20), (2, 8)])
def test_backward_per_branch_weights_use_whole_groups_of_blocks(
    fake, cpu_as_cuda, tokens, blocks, monkeypatch
):
    """Blocks come in groups of one per weight row (B a multiple of G): SMS * 4 = 528 for
    the generic H = 1000 is one already; fewer rows than that give one block per row."""
    made = new_empty_calls(monkeypatch)
    h, k, v, _, _ = ins(tokens, 4, 1000)
    w_h, w_k = t(4, 1000), t(4, 1000)
    grads = gate_bwd(t(tokens, 4, 1000), h, k, v, w_h, w_k, saved=stats(tokens, 4, 1000),
                     clamp_value=0.5)  # fmt: skip
    partial = made[-1]  # the scratch's workspace (fp32 [B, H]), allocated after the grads
    assert partial.numel() == blocks * 1000 * 4 and blocks % 4 == 0
    assert grads[3].shape == grads[4].shape == (4, 1000)
    m = tokens * 4
    assert fake.launches[0].shapes[6:12] == (m, 1000, 4, 1000, 4, 1000)
    assert fake.launches[0].shapes[22:] == (4, 1000, 4, 1000, blocks, 1000)
    assert fake.launches[0].scalars == (0.5,)


def test_backward_shared_value_sums_each_tokens_rows_in_float32(fake, cpu_as_cuda):
    """grad_v of a shared v ([T, 1, H]) is the float32 sum of each token's rows' g * go,
    rounded once (as TileKernels); the kernel's per-row terms go to an h-shaped scratch."""
    h, k, _, w_h, w_k = ins(3, 4, 64)
    v = t(3, 1, 64)
    go = torch.randn(3, 4, 64).to(BF16)
    saved = stats(3, 4, 64)
    saved[1].copy_(torch.rand(3, 4))
    grads = gate_bwd(go, h, k, v, w_h, w_k, saved=saved)
    assert grads[2].shape == v.shape and grads[2].dtype == BF16
    want = (go.double() * saved[1].double()[..., None]).sum(1, keepdim=True).to(BF16)
    assert torch.equal(grads[2], want)
    assert [g.shape for g in grads[:2]] == [h.shape] * 2
    launch_args = fake.launches[0]
    assert launch_args.ptrs[3] == v.data_ptr()
    assert launch_args.ptrs[12] not in (g.data_ptr() for g in grads)  # the scratch
    assert launch_args.shapes[6:8] == (3, 64)  # v's rows


def test_backward_shared_value_without_rows_zeroes_grad_v(fake, cpu_as_cuda):
    grads = gate_bwd(t(3, 0, 64), *with_(2, t(3, 1, 64), 3, 0, 64))
    assert torch.equal(grads[2], torch.zeros(3, 1, 64, dtype=BF16))
    assert fake.launches == []


def test_backward_out(fake, cpu_as_cuda):
    out = (t(4, 64), t(4, 64), t(4, 64), *wgrads(64))
    got = gate_bwd(t(4, 64), *ins(4, 64), saved=stats(4, 64), out=out)
    assert all(a is b for a, b in zip(got, out, strict=True))
    assert fake.launches[0].ptrs[10:15] == tuple(o.data_ptr() for o in out)


def test_backward_without_rows_zeroes_weight_gradients(fake, cpu_as_cuda):
    out = (t(0, 64), t(0, 64), t(0, 64), *wgrads(64))
    grads = gate_bwd(t(0, 64), *ins(0, 64), out=out)
    assert torch.equal(grads[3], torch.zeros(64, dtype=F32))
    assert torch.equal(grads[4], torch.zeros(64, dtype=F32))
    assert fake.launches == [] and fake.lookups == []


def test_blocks_per_sm_table_matches_the_kernels():
    kernels = importlib.import_module("kernels_py.engram.engram_gate_backward")
    short = {"bfloat16": "bf16", "float32": "fp32"}
    assert bwd_mod._BLOCKS_PER_SM == {
        (short[d], n): b for (d, n), b in kernels.BLOCKS_PER_SM.items()
    }
    assert bwd_mod._GENERIC_BLOCKS_PER_SM == kernels.GENERIC_BLOCKS_PER_SM


# --- autograd -------------------------------------------------------------------------------


def test_autograd_records_forward_and_runs_backward(fake, cpu_as_cuda):
    h, k, v, w_h, w_k = ins(2, 3, 64)
    h.requires_grad_()
    w_k.requires_grad_()
    out, g = gate(h, k, v, w_h, w_k, 1e-5, return_gate=True)
    assert out.requires_grad and not g.requires_grad
    assert [f.handle for f in fake.launches] == [1001]
    out.float().sum().backward()  # an expanded (stride-0) incoming gradient
    # The recorded forward saves the statistics (TileKernels' EngramGateFn); the backward
    # reads those very tensors.
    assert fake.lookups == [("engram_gate_save", "bf16"), ("engram_gate_backward", "bf16")]
    fwd_launch, launch = fake.launches
    assert fwd_launch.scalars == (1e-5, 1e-6) and fwd_launch.ptrs[7] == g.data_ptr()
    assert launch.ptrs[1:6] == tuple(x.data_ptr() for x in (h, k, v, w_h, w_k))
    assert launch.ptrs[6:10] == fwd_launch.ptrs[6:10]
    assert launch.scalars == (1e-6,)
    assert h.grad.shape == h.shape and w_k.grad.shape == w_k.shape
    assert k.grad is None and v.grad is None and w_h.grad is None


def test_autograd_rejects_out(fake, cpu_as_cuda):
    h, k, v, w_h, w_k = ins(4, 64)
    v.requires_grad_()
    with pytest.raises(RuntimeError, match=r"out= is not supported when an input requires"):
        gate(h, k, v, w_h, w_k, out=t(4, 64))
    assert fake.launches == []


def test_no_grad_skips_autograd(fake, cpu_as_cuda):
    h, k, v, w_h, w_k = ins(4, 64)
    h.requires_grad_()
    with torch.no_grad():
        out = gate(h, k, v, w_h, w_k, out=t(4, 64))
    assert not out.requires_grad and len(fake.launches) == 1
