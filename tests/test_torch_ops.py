"""CPU tests of the torch custom ops (`tileaot.torch_ops`, ``torch.ops.tileaot.*``).

No GPU and no native module: `fake` records launches instead of running them and `cpu_as_cuda`
lets CPU tensors through (tests/_fakes.py), so the custom ops' real implementations run the real
wrappers down to the launch. Outputs are never computed here (their values are whatever
``torch.empty`` held); what is checked is what reaches the launch, and the shapes and dtypes:

* every public op is registered, with the wrapper's argument names, order and defaults;
* each fake implementation (run on meta tensors) gives the shapes, dtypes and strides the
  wrapper allocates, on several shapes per op;
* the functional op and its ``_out`` variant launch exactly what the wrapper launches;
* ``torch.library.opcheck`` (schema, autograd registration, fake tensors) on every case;
* autograd of sinkhorn_normalize, expand_to_mhc and engram_gate reaches the backward kernels,
  also compiled;
* ``torch.compile(fullgraph=True)`` (a graph break would raise) of a block written with
  ``torch.ops.tileaot.*``, static and dynamic shapes, and of one written with the public
  functions (``out=``, keywords, ``return_gate``), launches what eager does; so does a compiled
  call of each public function, its fake running on symbolic sizes.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, t, tileaot  # noqa: E402, F401
from _kernel_args import pointer  # noqa: E402
from _torch_ops_helpers import block, wrapper_block, wrapper_call  # noqa: E402
from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

torch_ops = importlib.import_module("tileaot.torch_ops")
SPECS = {s.name: s for s in importlib.import_module("tileaot.torch_ops._specs").SPECS}
BF16, F16, F32, FP8 = torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn
I32, I64 = torch.int32, torch.int64
NOT_OPS = {"info", "MoeExpandResult", "register_torch_ops", "use_stream"}  # the rest are ops


@pytest.fixture(autouse=True)
def _sms(monkeypatch: pytest.MonkeyPatch) -> None:
    """engram_gate_backward sizes its scratch by the GPU's SM count: give it one."""
    mod = importlib.import_module("tileaot.engram_gate_backward")
    monkeypatch.setattr(mod, "_sm_count", lambda device: 132)


def fp8(*shape: int) -> torch.Tensor:
    return torch.randn(shape).to(FP8)


def u8(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8)


def idx(rows: int, cols: int, high: int) -> torch.Tensor:
    return torch.randint(-1, high, (rows, cols), dtype=torch.int32)


def engram(*shape: int, dtype: torch.dtype = BF16) -> tuple[torch.Tensor, ...]:
    """(h, k, v, w_h, w_k)."""
    n = shape[-1]
    return (*(t(*shape, dtype=dtype) for _ in range(3)), t(n, dtype=dtype), t(n, dtype=dtype))


def shared_v(args: tuple) -> tuple:
    """`engram`'s arguments with v shared by each token's rows ([T, 1, H])."""
    h, k, v, w_h, w_k = args
    return h, k, v[:, :1].contiguous(), w_h, w_k


# (op, arguments as the torch op takes them positionally): valid calls, several shapes per op.
CASES = [
    ("rms_norm", lambda: (t(4, 64), t(64))),
    ("rms_norm", lambda: (t(2, 3, 32, dtype=F32), t(32, dtype=F32), 1e-5)),
    ("gemm", lambda: (t(16, 64), t(32, 64))),
    ("gemm", lambda: (t(5, 8, dtype=F16), t(24, 8, dtype=F16))),
    ("per_token_cast_fp8", lambda: (t(4, 256),)),
    ("per_token_cast_fp8", lambda: (t(3, 100), None)),
    ("per_token_cast_fp8", lambda: (t(2, 384, dtype=F32), 384)),
    ("per_token_cast_fp4", lambda: (t(4, 64),)),
    ("per_token_cast_fp4", lambda: (t(2, 3, 32, dtype=F16), 16, "e4m3")),
    ("per_block_cast_fp8", lambda: (t(130, 200),)),
    ("per_block_cast_fp8", lambda: (t(5, 128, dtype=F32),)),
    ("per_block_cast_fp8", lambda: (t(256, 72, dtype=F16),)),
    ("per_block_cast_lossless", lambda: (u8(130, 96), u8(130, 6))),
    ("per_block_cast_lossless", lambda: (u8(5, 64), t(5, 1, dtype=F32), 1, 128, 1, 128, "ue8m0")),
    ("per_channel_cast_fp8", lambda: (t(130, 200),)),
    ("per_channel_cast_fp8", lambda: (t(5, 36, dtype=F32),)),
    ("per_channel_cast_fused", lambda: (t(6, 64), idx(40, 1, 6).view(40))),
    (
        "per_channel_cast_fused",
        lambda: (fp8(5, 256), idx(20, 1, 5).view(20), t(5, 2, dtype=F32), True),
    ),
    ("per_channel_cast_and_transpose", lambda: (t(128, 72),)),
    ("per_channel_cast_and_transpose", lambda: (t(64, 16, dtype=F16), 32, True)),
    ("swiglu_per_channel_cast_and_transpose", lambda: (t(128, 48),)),
    ("swiglu_per_channel_cast_and_transpose", lambda: (t(64, 32), 32, 7.0, True)),
    ("per_token_cast_e5m6", lambda: (t(4, 64),)),
    ("per_token_cast_e5m6", lambda: (t(3, 40, dtype=F32), True)),
    ("cast_back", lambda: (fp8(4, 256), t(4, 2, dtype=F32))),
    ("cast_back", lambda: (fp8(130, 200), t(2, 2, dtype=F32), "block128", None, F32)),
    ("cast_back", lambda: (fp8(3, 40), t(3, 1, dtype=F32), None, 40)),
    ("cast_back", lambda: (u8(4, 32), u8(4, 2), None, 32)),
    ("cast_back", lambda: (u8(2, 3, 8), fp8(2, 3, 1), None, 16, F32)),
    ("cast_back_e5m6", lambda: (u8(4, 96), t(4, 1, dtype=F32))),
    ("cast_back_e5m6", lambda: (u8(3, 48), t(3, 4, dtype=F32), F32)),
    ("topk_gate", lambda: (t(6, 64, dtype=F32), 4)),
    ("topk_gate", lambda: (t(3, 300, dtype=F32), 8, "sigmoid", False)),
    ("top2_sum_gate", lambda: (t(6, 256, dtype=F32), t(256, dtype=F32), 8, 8, 4, 2.5, 1)),
    ("top2_sum_gate", lambda: (t(3, 160, dtype=F32), t(160, dtype=F32), 6, 0, 0, 1.0, 0, 4, 1, 2)),
    ("topk_sum_and_topk_group_idx", lambda: (t(6, 8, 32, dtype=F32), 2, 4)),
    ("topk_sum_and_topk_group_idx", lambda: (t(3, 5, 1, dtype=F32), 1, 5)),
    ("normalize_weight", lambda: (t(6, 8, dtype=F32),)),
    ("normalize_weight", lambda: (t(3, 1, dtype=F32),)),
    ("mask_indices_by_tp", lambda: (idx(6, 8, 256), 256, 8, 1, 2)),
    ("mask_indices_by_tp", lambda: (idx(3, 1, 7), 7, 1, 0, 1)),
    ("group_count", lambda: (idx(6, 8, 256), 256)),
    ("group_count", lambda: (idx(3, 1, 7), 5)),
    ("aux_fi", lambda: (idx(6, 8, 256), 256, 8)),
    ("aux_fi", lambda: (idx(3, 1, 7), 5, 1)),
    ("inplace_unique_group_indices", lambda: (idx(6, 4, 8), 8)),
    ("inplace_unique_group_indices", lambda: (idx(3, 1, 7), 7)),
    (
        "engram_hash",
        lambda: (idx(6, 3, 99), t(2, 3, dtype=I64), t(2, 2, 8, dtype=I32), idx(2, 16, 9)),
    ),
    (
        "engram_hash",
        lambda: (idx(3, 2, 9), t(1, 2, dtype=I64), t(1, 1, 1, dtype=I32), idx(1, 1, 9)),
    ),
    ("engram_fused_weight", lambda: (t(4, 64), t(4, 64))),
    ("engram_fused_weight", lambda: (t(3, 7), t(3, 7))),
    (
        "engram_grad_w_reduce",
        lambda: (
            t(6, 4, 64, dtype=F32),
            t(4, 64),
            t(4, 64),
            t(4, 64, dtype=F32),
            t(4, 64, dtype=F32),
        ),
    ),
    (
        "engram_grad_w_reduce",
        lambda: (t(0, 1, 7, dtype=F32), t(1, 7), t(1, 7), t(1, 7, dtype=F32), t(1, 7, dtype=F32)),
    ),
    ("swiglu", lambda: (t(4, 64),)),
    ("swiglu", lambda: (t(2, 3, 10, dtype=F32),)),
    ("swiglu_per_token_cast_fp8", lambda: (t(4, 512),)),
    ("swiglu_per_token_cast_fp8", lambda: (t(3, 256), t(3, dtype=F32), 7.0)),
    ("transpose", lambda: (t(16, 32),)),
    ("transpose", lambda: (t(2, 3, 5, dtype=torch.int16),)),
    ("sinkhorn_normalize", lambda: (t(8, 4, 4, dtype=F32),)),
    ("sinkhorn_normalize", lambda: (t(3, 5, 5, dtype=F32), 1, 0.0)),
    ("sinkhorn_normalize_backward", lambda: (t(8, 4, 4, dtype=F32), t(8, 4, 4, dtype=F32))),
    ("sinkhorn_normalize_backward", lambda: (t(2, 3, 3, dtype=F32), t(2, 3, 3, dtype=F32), 3)),
    ("expand_to_mhc", lambda: (t(6, 64), 4)),
    ("expand_to_mhc", lambda: (t(2, 3, 10), 1)),
    ("expand_to_mhc_backward", lambda: (t(6, 4, 64),)),
    ("expand_to_mhc_backward", lambda: (t(2, 3, 8, 10),)),
    ("mhc_pre_apply_mix", lambda: (t(6, 4, 64), t(6, 4, 1, dtype=F32))),
    ("mhc_pre_apply_mix", lambda: (t(2, 3, 2, 10), t(2, 3, 2, 1, dtype=F32))),
    ("mhc_pre_apply_mix_backward", lambda: (t(6, 64), t(6, 4, 64), t(6, 4, 1, dtype=F32))),
    ("mhc_pre_norm_fn", lambda: (t(6, 4, 64), t(24, 4 * 64, dtype=F32))),
    ("mhc_pre_norm_fn", lambda: (t(2, 3, 2, 8), t(5, 2, 8, dtype=F32), t(2 * 8, dtype=F32), 1e-5)),
    ("mhc_pre_norm_fn_backward", lambda: (t(6, 24, dtype=F32), t(6, 4, 64), t(24, 256, dtype=F32))),
    (
        "mhc_pre_norm_fn_backward",
        lambda: (t(2, 3, 5, dtype=F32), t(2, 3, 2, 8), t(5, 2, 8, dtype=F32), 1e-5),
    ),
    (
        "mhc_pre_split_mixes",
        lambda: (t(6, 24, dtype=F32), t(3, dtype=F32), t(24, dtype=F32), 4, 2.0, 1e-6),
    ),
    (
        "mhc_pre_split_mixes_backward",
        lambda: (
            t(6, 4, 1, dtype=F32),
            t(6, 4, 1, dtype=F32),
            t(6, 4, 4, dtype=F32),
            t(6, 24, dtype=F32),
            t(3, dtype=F32),
            t(24, dtype=F32),
            2.0,
        ),
    ),
    (
        "mhc_head_compute_mix",
        lambda: (t(2, 3, 4, dtype=F32), t(1, dtype=F32), t(4, dtype=F32), 1e-6),
    ),
    (
        "mhc_head_compute_mix_backward",
        lambda: (t(6, 4, dtype=F32), t(6, 4, dtype=F32), t(1, dtype=F32), t(4, dtype=F32)),
    ),
    ("mhc_post", lambda: (t(6, 64), t(6, 4, 64), t(6, 4, 1, dtype=F32), t(6, 4, 4, dtype=F32))),
    (
        "mhc_post_backward",
        lambda: (t(6, 4, 64), t(6, 64), t(6, 4, 64), t(6, 4, 1, dtype=F32), t(6, 4, 4, dtype=F32)),
    ),
    ("moe_expand", lambda: (t(6, 64), idx(6, 2, 8), 8)),
    ("moe_expand", lambda: (fp8(6, 256), idx(6, 3, 4), 4, 1, t(6, 2, dtype=F32))),
    ("expand_to_fused", lambda: (t(6, 64), idx(6, 2, 20), idx(20, 1, 3).view(20))),
    ("expand_to_fused", lambda: (fp8(3, 40), idx(3, 1, 5), idx(5, 1, 2).view(5))),
    (
        "expand_to_fused_with_sf",
        lambda: (fp8(6, 256), t(6, 2, dtype=F32), idx(6, 2, 20), idx(20, 1, 3).view(20)),
    ),
    (
        "expand_to_fused_with_sf",
        lambda: (fp8(3, 40), idx(3, 1, 9), idx(3, 1, 5), idx(5, 1, 2).view(5), True),
    ),
    (
        "swiglu_backward",
        lambda: (
            (fp8(6, 256), t(6, 2, dtype=F32), t(6, 128), t(4, 2, dtype=F32))
            + (idx(6, 1, 8).view(6), idx(4, 2, 6))
        ),
    ),
    (
        "swiglu_backward",
        lambda: (
            (fp8(3, 64), t(3, 2, dtype=F32), t(3, 32), t(2, 3, dtype=F32))
            + (idx(3, 1, 6).view(3), idx(2, 3, 3), 0.5, BF16)
        ),
    ),
    ("moe_reduce", lambda: (t(40, 64), idx(6, 2, 40))),
    ("moe_reduce", lambda: (t(40, 64, dtype=F32), idx(6, 2, 40), t(6, 2, dtype=F32), BF16)),
    ("engram_gate", lambda: engram(4, 64)),
    ("engram_gate", lambda: (*engram(2, 3, 8, dtype=F32), 1e-5)),
    ("engram_gate_backward", lambda: (t(4, 64), *engram(4, 64))),
    ("engram_gate_backward", lambda: (t(2, 3, 8, dtype=F32), *engram(2, 3, 8, dtype=F32), 0.0)),
    ("engram_gate", lambda: shared_v(engram(2, 3, 8))),
    ("engram_gate_backward", lambda: (t(2, 3, 8), *shared_v(engram(2, 3, 8)))),
]
CASE_IDS = [f"{op}-{i}" for i, (op, _) in enumerate(CASES)]


def _schema(op: str):
    return getattr(torch.ops.tileaot, op).default._schema


def _launched(c) -> list[tuple]:
    """What reached the native module, less the pointers (the outputs are new each call)."""
    return [(c.by_handle[r.handle], r.device, r.stream, r.shapes, r.scalars) for r in c.launches]


def _meta(args: tuple) -> tuple:
    return tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)


def _tensors(result) -> list[torch.Tensor | None]:
    return [result] if isinstance(result, torch.Tensor) else list(result)


def test_every_public_op_is_registered_with_a_functional_and_an_out_variant():
    public = set(tileaot.__all__) - NOT_OPS
    assert set(SPECS) == public, "add the op to tileaot/torch_ops/_specs.py (or to NOT_OPS)"
    assert set(torch_ops.op_names()) == public | {f"{op}_out" for op in public}
    for name in torch_ops.op_names():
        assert _schema(name).name == f"tileaot::{name}"


@pytest.mark.parametrize("op", sorted(SPECS))
def test_schema_arguments_are_the_wrappers_parameters(op):
    spec = SPECS[op]
    params = [
        p
        for p in inspect.signature(spec.fn).parameters.values()
        if p.name != "out" and p.name not in spec.fixed
    ]
    args = _schema(op).arguments
    assert [a.name for a in args] == [p.name for p in params]
    for a, p in zip(args, params, strict=True):
        if p.default is inspect.Parameter.empty:
            assert not a.has_default_value(), a.name
        else:
            assert a.has_default_value() and a.default_value == p.default, a.name
    out_args = _schema(f"{op}_out").arguments
    n_out = len(out_args) - len(args)
    assert n_out == len(spec.outs) and all(a.alias_info.is_write for a in out_args[:n_out])


@pytest.mark.parametrize(("op", "make"), CASES, ids=CASE_IDS)
def test_fake_matches_wrapper_and_op_launches_as_wrapper(fake, cpu_as_cuda, op, make):
    args = make()
    expected = _tensors(wrapper_call(op, args))
    wrapper_launches = _launched(fake)
    fake.launches.clear()
    got = _tensors(getattr(torch.ops.tileaot, op)(*args))
    assert _launched(fake) == wrapper_launches and wrapper_launches
    metas = _tensors(getattr(torch.ops.tileaot, op)(*_meta(args)))
    assert len(got) == len(metas) == len(expected)
    for e, g, m in zip(expected, got, metas, strict=True):
        if e is None:
            assert g is None and m is None
            continue
        assert m.device.type == "meta"
        for r in (g, m):
            assert (r.shape, r.dtype, r.stride()) == (e.shape, e.dtype, e.stride())


@pytest.mark.parametrize(("op", "make"), CASES, ids=CASE_IDS)
def test_out_variant_writes_into_the_given_tensors(fake, cpu_as_cuda, op, make):
    args = make()
    outs = [None if r is None else torch.empty_like(r) for r in _tensors(wrapper_call(op, args))]
    fake.launches.clear()
    assert getattr(torch.ops.tileaot, f"{op}_out")(*outs, *args) is None
    launched = _launched(fake)
    written = {p for r in fake.launches for p in r.ptrs}
    if op == "engram_gate_backward" and args[3].shape != args[1].shape:
        written.add(outs[2].data_ptr())  # a shared v's grad_v: a torch sum of a kernel's scratch
    assert {o.data_ptr() for o in outs if o is not None} <= written
    fake.launches.clear()
    given = [o for o in outs if o is not None]
    wrapper_call(op, args, out=given[0] if len(outs) == 1 else tuple(given))
    assert launched == _launched(fake)


@pytest.mark.parametrize(("op", "make"), CASES, ids=CASE_IDS)
def test_opcheck(fake, cpu_as_cuda, op, make):
    # test_aot_dispatch_* compare output values, which the fake native module never writes: the
    # GPU suite (tests/test_gpu_torch_ops.py) runs the full opcheck.
    args = make()
    utils = ("test_autograd_registration", "test_faketensor")
    if not any(isinstance(a, torch.Tensor) and a.dtype == FP8 for a in args):
        utils += ("test_schema",)  # it compares inputs with allclose, which has no fp8 kernel
    torch.library.opcheck(getattr(torch.ops.tileaot, op), args, test_utils=utils)


def test_sinkhorn_normalize_backward_goes_through_the_backward_op(fake, cpu_as_cuda):
    logits = t(8, 4, 4, dtype=F32).requires_grad_()
    p = torch.ops.tileaot.sinkhorn_normalize(logits, 7, 1e-4)
    grad = t(4, 4, 8, dtype=F32).transpose(0, 2)  # not contiguous: the op makes it so
    p.backward(grad)
    fwd, bwd = fake.launches
    assert fake.by_handle[fwd.handle] == ("sinkhorn_normalize", "fp32")
    assert fake.by_handle[bwd.handle] == ("sinkhorn_normalize_backward", "fp32")
    assert bwd.scalars == fwd.scalars == (7, 1e-4)
    op = "sinkhorn_normalize_backward"
    assert pointer(bwd, op, "logits") == logits.data_ptr()
    assert pointer(bwd, op, "grad_out") != grad.data_ptr()  # made contiguous: a copy
    assert pointer(bwd, op, "grad_logits") == logits.grad.data_ptr()
    assert logits.grad.shape == logits.shape


def test_expand_to_mhc_backward_goes_through_the_backward_op(fake, cpu_as_cuda):
    hidden = t(6, 64).requires_grad_()
    torch.ops.tileaot.expand_to_mhc(hidden, 4).sum().backward()  # an expanded (stride-0) grad
    fwd, bwd = fake.launches
    assert fake.by_handle[fwd.handle] == ("expand_to_mhc", "bf16")
    assert fake.by_handle[bwd.handle] == ("expand_to_mhc_backward", "bf16")
    assert fwd.shapes == (6, 64, 6, 4, 64) and bwd.shapes == (6, 4, 64, 6, 64)
    assert pointer(bwd, "expand_to_mhc_backward", "grad_x") == hidden.grad.data_ptr()
    assert hidden.grad.shape == hidden.shape


def test_mhc_pre_norm_fn_backward_goes_through_the_backward_op(fake, cpu_as_cuda):
    """The saved inputs, the scalar, and the norm weight's multiply around the backward op
    (its gradient in torch: mhc_fn_grad times mhc_fn, summed over the mixes)."""
    residual, fn, w = t(6, 4, 64).requires_grad_(), t(24, 256, dtype=F32), t(256, dtype=F32)
    fn.requires_grad_()
    w.requires_grad_()
    torch.ops.tileaot.mhc_pre_norm_fn(residual, fn, w, 1e-5).sum().backward()
    fwd, bwd = fake.launches
    assert fake.by_handle[bwd.handle] == ("mhc_pre_norm_fn_backward", "bf16")
    assert bwd.scalars == fwd.scalars and bwd.ptrs[1] == residual.data_ptr()
    assert bwd.ptrs[2] not in (fn.data_ptr(), w.data_ptr())  # fn * w, made again
    assert residual.grad.shape == (6, 4, 64) and residual.grad.dtype == torch.bfloat16
    assert fn.grad.shape == (24, 256) and w.grad.shape == (256,)


def test_engram_gate_backward_skips_the_gate_and_unneeded_grads(fake, cpu_as_cuda):
    h, k, v, w_h, w_k = engram(4, 64)
    h.requires_grad_()
    w_k.requires_grad_()
    out, gate = torch.ops.tileaot.engram_gate(h, k, v, w_h, w_k, 1e-5)
    assert out.requires_grad and not gate.requires_grad
    out.sum().backward()
    # The backward op computes the forward's statistics (engram_gate_save), then reads them.
    assert [fake.by_handle[r.handle][0] for r in fake.launches] == [
        "engram_gate",
        "engram_gate_save",
        "engram_gate_backward",
    ]
    save, bwd = fake.launches[1:]
    assert save.scalars == (1e-5, 1e-6) and bwd.scalars == (1e-6,)
    read = [pointer(bwd, "engram_gate_backward", n) for n in ("dot", "gate", "rstd_h", "rstd_k")]
    assert read == [pointer(save, "engram_gate_save", n) for n in ("dot", "g", "rstd_h", "rstd_k")]
    assert h.grad.shape == h.shape and w_k.grad.shape == w_k.shape
    assert pointer(bwd, "engram_gate_backward", "grad_h") == h.grad.data_ptr()
    assert w_k.grad.dtype == w_k.dtype  # the op's float32 weight grad, cast by autograd
    assert k.grad is None and w_h.grad is None


def test_backward_op_copies_a_misaligned_gradient(fake, cpu_as_cuda):
    logits = t(2, 4, 4, dtype=F32)
    grad = torch.zeros(2 * 16 + 1, dtype=F32)[1:].view(2, 4, 4)  # contiguous, 4 bytes off
    torch.ops.tileaot.sinkhorn_normalize_backward(grad, logits)
    (bwd,) = fake.launches
    copied = pointer(bwd, "sinkhorn_normalize_backward", "grad_out")
    assert copied % 16 == 0 and copied != grad.data_ptr()
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        tileaot.sinkhorn_normalize_backward(grad, logits)  # the wrapper itself stays strict


def test_op_errors_are_the_wrappers(fake, cpu_as_cuda):
    with pytest.raises(ValueError, match=r"weight must have shape \(64,\)"):
        torch.ops.tileaot.rms_norm(t(4, 64), t(32))
    with pytest.raises(ValueError, match="out has shape"):
        torch.ops.tileaot.rms_norm_out(t(4, 32), t(4, 64), t(64))
    assert not fake.launches


def block_inputs(m: int) -> tuple[torch.Tensor, ...]:
    return t(m, 64), t(64), t(16, 64), t(96, 64), t(64, 48)  # x, w, w_router, w_up, w_down


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_launches_what_eager_launches(fake, cpu_as_cuda, dynamic):
    torch._dynamo.reset()
    backend = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, fullgraph=True, backend=backend, dynamic=dynamic)
    for m in (24, 40) if dynamic else (24,):
        inputs = block_inputs(m)
        fake.launches.clear()
        out, offsets = block(*inputs)
        eager = _launched(fake)
        fake.launches.clear()
        c_out, c_offsets = compiled(*inputs)
        assert _launched(fake) == eager and len(eager) == 10
        assert (c_out.shape, c_out.dtype) == (out.shape, out.dtype) == ((m, 64), BF16)
        assert c_offsets.shape == offsets.shape == (17,)
    assert backend.frame_count == 1  # one graph; with dynamic shapes, for both sizes


@pytest.mark.parametrize("public", [False, True], ids=["torch.ops.tileaot", "tileaot"])
def test_compile_fullgraph_with_backward(fake, cpu_as_cuda, public):
    torch._dynamo.reset()
    ops = tileaot if public else torch.ops.tileaot

    def loss(logits, h, k, v, w_h, w_k):
        p = ops.sinkhorn_normalize(logits, 3, 1e-6)
        out = ops.engram_gate(h, k, v, w_h, w_k, 1e-6)
        out = out if public else out[0]
        return p.sum() + out.float().sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    logits = t(8, 4, 4, dtype=F32).requires_grad_()
    h, *rest = engram(4, 64)
    h.requires_grad_()
    compiled(logits, h, *rest).backward()
    launched = sorted(fake.by_handle[r.handle][0] for r in fake.launches)
    # The compiled graph runs the torch op engram_gate ((out, g)); its backward op computes
    # the statistics first (engram_gate_save), then the gradients.
    assert launched == sorted(
        ["sinkhorn_normalize", "engram_gate", "sinkhorn_normalize_backward", "engram_gate_save",
         "engram_gate_backward"]
    )  # fmt: skip
    assert logits.grad.shape == logits.shape and h.grad.shape == h.shape


@pytest.mark.parametrize("op", sorted(SPECS))
def test_compiled_call_of_the_public_function_is_the_op(fake, cpu_as_cuda, op):
    args = next(make for name, make in CASES if name == op)()
    fn, names = SPECS[op].fn, [a.name for a in _schema(op).arguments]

    def call(*args):  # by keyword: the stand-in binds keywords and fills the defaults
        return fn(**dict(zip(names, args, strict=False)))

    expected = call(*args)
    launched = _launched(fake)
    fake.launches.clear()
    torch._dynamo.reset()
    # dynamic=True: Dynamo runs the op's fake implementation on symbolic sizes.
    got = torch.compile(call, fullgraph=True, backend="eager", dynamic=True)(*args)
    assert _launched(fake) == launched
    assert type(got) is type(expected)
    for g, e in zip(_tensors(got), _tensors(expected), strict=True):
        assert (g is None and e is None) or (g.shape, g.dtype) == (e.shape, e.dtype)


@pytest.mark.parametrize("backend_name", ["eager", "aot_eager"])
def test_compiled_model_code_with_public_functions_launches_what_eager_launches(
    fake, cpu_as_cuda, backend_name
):
    torch._dynamo.reset()
    backend = CompileCounterWithBackend(backend_name)
    compiled = torch.compile(wrapper_block, fullgraph=True, backend=backend)
    inputs = (*block_inputs(24), t(24, 64))
    eager = wrapper_block(*inputs)
    launched = _launched(fake)
    fake.launches.clear()
    got = compiled(*inputs)
    assert _launched(fake) == launched and len(launched) == 11
    assert backend.frame_count == 1
    if backend_name == "eager":  # aot_eager functionalises: a copy, then copied back to buf
        assert pointer(fake.launches[0], "rms_norm", "y") == inputs[-1].data_ptr()  # out=
    assert [(g.shape, g.dtype) for g in got] == [(e.shape, e.dtype) for e in eager]


def test_unknown_keyword_in_compiled_code_is_a_type_error(fake, cpu_as_cuda):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: tileaot.swiglu(x, outt=None), backend="eager")
    with pytest.raises(TypeError, match="unexpected keyword argument 'outt'"):
        compiled(t(4, 64))


def test_a_torch_without_substitution_only_warns(monkeypatch):
    from tileaot import _schema_torch

    monkeypatch.setattr(torch.compiler, "substitute_in_graph", None, raising=False)
    specs = (SPECS["rms_norm"], SPECS["gemm"])
    with pytest.warns(UserWarning, match=r"rms_norm, gemm: NotImplementedError: .*torch >= 2.5"):
        _schema_torch.substitute("tileaot", specs)


def test_registering_again_does_nothing():
    names = torch_ops.op_names()
    tileaot.register_torch_ops()
    torch_ops.register()
    assert torch_ops.op_names() == names


def test_ops_are_registered_only_on_request_and_import_tileaot_stays_torch_free():
    code = (
        "import sys, tileaot\n"
        "assert 'torch' not in sys.modules and 'tileaot.torch_ops' not in sys.modules\n"
        "import torch\n"
        "assert not hasattr(torch.ops.tileaot, 'rms_norm')\n"
    )
    pkg_parent = os.path.dirname(os.path.dirname(tileaot.__file__))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([pkg_parent, os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
