"""`schema_op`: a public function from an `OpSchema` alone (the ops of external-kernel wheels).

Its oracle is tileaot's own hand-written wrappers: made from the schemas of rms_norm, gemm and
swiglu, the generic function must hand the recording fake of `_C` the same launches (variant,
pointers, flat shapes, scalars, stream) and raise the same errors, on the checked path and the
short path. Then what only it does: scalar checks by kernel type, the schemas it refuses, its
docstring and signature, and its torch custom ops (`_schema_torch`).
"""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, misaligned, t, tileaot  # noqa: E402
from test_short_path import module_fake  # noqa: E402
from tileaot._schema import OpSchema  # noqa: E402
from tileaot._schema_op import schema_op, unsupported  # noqa: E402
from tileaot.gemm import SCHEMA as GEMM  # noqa: E402
from tileaot.rms_norm import SCHEMA as RMS_NORM  # noqa: E402
from tileaot.swiglu import SCHEMA as SWIGLU  # noqa: E402

__all__ = ["cpu_as_cuda", "fake", "module_fake"]  # fixtures, used by name

pytestmark = pytest.mark.usefixtures("cpu_as_cuda")

BF16, FP16 = torch.bfloat16, torch.float16


def _record(fake, fn, args) -> tuple:
    """What `fn(*args)` did: the launches (pointers as (argument, offset)), or the error."""
    fake.launches.clear()
    try:
        result = fn(*args)
    except Exception as e:  # noqa: BLE001 - the error is the record
        return ("raised", type(e).__name__, str(e))
    bases = {a.data_ptr(): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    results = result if isinstance(result, tuple) else (result,)
    bases.update({r.data_ptr(): f"result{i}" for i, r in enumerate(results)})
    launches = [
        (fake.by_handle[x.handle], [bases.get(p, "?") for p in x.ptrs], x.shapes, x.scalars)
        + (x.stream,)
        for x in fake.launches
    ]
    return ("ok", launches, [tuple(r.shape) for r in results])


CASES = [
    # (schema, hand-written op, arguments)
    (RMS_NORM, "rms_norm", (t(4, 64), t(64), 1e-6)),
    (RMS_NORM, "rms_norm", (t(2, 3, 64), t(64), 0.5)),
    (RMS_NORM, "rms_norm", (t(0, 64), t(64), 1e-6)),  # empty: no launch
    (RMS_NORM, "rms_norm", (t(4, 64, dtype=FP16), t(64, dtype=FP16), 1e-6)),
    (RMS_NORM, "rms_norm", (t(4, 64), t(32), 1e-6)),  # weight does not match x
    (RMS_NORM, "rms_norm", (t(4, 64), t(64, dtype=FP16), 1e-6)),  # dtypes differ
    (RMS_NORM, "rms_norm", (t(4, 64).t(), t(4), 1e-6)),  # not contiguous
    (RMS_NORM, "rms_norm", (misaligned(4, 64), t(64), 1e-6)),
    (RMS_NORM, "rms_norm", (t(4, 64, dtype=torch.int32), t(64), 1e-6)),
    (RMS_NORM, "rms_norm", ([1.0], t(64), 1e-6)),  # not a tensor
    (RMS_NORM, "rms_norm", (t(64), t(64), 1e-6)),  # no leading dims: M = 1
    (GEMM, "gemm", (t(8, 32), t(16, 32))),
    (GEMM, "gemm", (t(8, 32), t(16, 24))),  # K differs
    (SWIGLU, "swiglu", (t(4, 64),)),
    (SWIGLU, "swiglu", (t(2, 2, 64),)),
    (SWIGLU, "swiglu", (t(4, 63),)),  # not 2*H
]


@pytest.mark.parametrize("schema, op, args", CASES)
def test_same_as_the_hand_written_op(fake, schema, op, args) -> None:
    generic = schema_op(schema)
    want = _record(fake, getattr(tileaot, op), args)
    assert _record(fake, generic, args) == want
    if want[0] == "ok" and want[1]:  # twice more: the short path once learned, then with out=
        assert _record(fake, generic, args) == _record(fake, getattr(tileaot, op), args)


def test_out_is_written_and_returned(fake) -> None:
    op = schema_op(RMS_NORM)
    x, w = t(4, 64), t(64)
    out = torch.empty_like(x)
    for _ in range(2):  # the checked path, then the short path
        assert op(x, w, 1e-6, out=out) is out
    assert fake.launches[-1].ptrs[2] == out.data_ptr()
    with pytest.raises(ValueError, match=r"^out has shape \(2, 64\); this call writes \(4, 64\)"):
        op(x, w, 1e-6, out=out[:2])


def test_the_variant_miss_of_the_build(fake) -> None:
    fake.missing.add(("rms_norm", "fp16"))
    with pytest.raises(fake.VariantMissError, match="rms_norm"):
        schema_op(RMS_NORM)(t(4, 64, dtype=FP16), t(64, dtype=FP16), 1e-6)


SCALARS = OpSchema("scale", "x[N]: fp32 -> y[N]: fp32; a: float32, k: int32", dtypes={}, key="")


@pytest.mark.parametrize(
    "a, k, error",
    [
        ("1", 2, "TypeError: a must be a real number, got str"),
        (True, 2, "TypeError: a must be a real number, got bool"),
        (1.0, 2.0, "TypeError: k must be an int, got float"),
        (1.0, 1 << 31, "ValueError: k must fit in int32: -2147483648 <= k < 2147483648; got"),
    ],
)
def test_scalars_are_checked_by_kernel_type(fake, a, k, error) -> None:
    op = schema_op(SCALARS)
    x = t(8, dtype=torch.float32)
    with pytest.raises(Exception) as info:
        op(x, a, k)
    assert f"{type(info.value).__name__}: {info.value}".startswith(error)
    assert not fake.launches


def test_scalars_convert(fake) -> None:
    op = schema_op(SCALARS)
    op(t(8, dtype=torch.float32), 2, 3)  # an int for a float32: fine (as Python floats take it)
    assert fake.launches[-1].scalars == (2.0, 3)
    assert type(fake.launches[-1].scalars[0]) is float
    assert fake.lookups[-1] == ("scale", "")


@pytest.mark.parametrize(
    "text, key, why",
    [
        ("x[N]: T, w?[N]: T -> y[N]: T", "{T}", "tensor 'w' is optional"),
        ("x[N]: T -> y[N]: T", "{T},{mode}", "uses 'mode', which is no dtype variable"),
        ("x[N]: T -> y[N]: T; n: int8", "{T}", "scalar n: int8 is not one of"),
        ("x[N]: T -> y[N]: T, scratch w[N]: fp32", "{T}", "it has scratch tensors"),
        ("x[N]: T, out[N]: T -> y[N]: T", "{T}", "an input or scalar is named 'out'"),
    ],
)
def test_schemas_it_refuses(text, key, why) -> None:
    schema = OpSchema("op", text, dtypes={"T": ("bf16",)}, key=key)
    assert why in unsupported(schema)
    with pytest.raises(ValueError, match=f"^op op: no function from its schema alone: .*{why}"):
        schema_op(schema)


def test_signature_and_docstring() -> None:
    op = schema_op(RMS_NORM, "Root-mean-square normalisation.", module="my_ops")
    assert str(inspect.signature(op)) == (
        "(x: 'torch.Tensor', weight: 'torch.Tensor', eps: float, *, "
        "out: 'torch.Tensor | None' = None) -> 'torch.Tensor'"
    )
    assert op.__name__ == "rms_norm" and op.__module__ == "my_ops"
    doc = op.__doc__
    assert doc.startswith("Root-mean-square normalisation.\n\nArgs:\n")
    assert "x: CUDA tensor of shape ``(..., N)``, dtype bfloat16 or float16 or float32" in doc
    assert "VariantMissError" in doc


def test_torch_ops(fake) -> None:
    from tileaot import _schema_torch

    fns = (schema_op(RMS_NORM), schema_op(GEMM))
    names = _schema_torch.register("tileaot_schema_op_test", fns)
    assert names == ("rms_norm", "rms_norm_out", "gemm", "gemm_out")
    ops = torch.ops.tileaot_schema_op_test
    x, w = t(4, 64), t(64)
    y = ops.rms_norm(x, w, eps=0.5)
    assert y.shape == x.shape and fake.launches[-1].scalars == (0.5,)
    out = torch.empty(4, 16, dtype=BF16)
    ops.gemm_out(out, t(4, 32), t(16, 32))
    assert fake.launches[-1].ptrs[2] == out.data_ptr()
    with torch._subclasses.FakeTensorMode():
        shape = ops.gemm(torch.empty(5, 32, dtype=BF16), torch.empty(7, 32, dtype=BF16)).shape
    assert tuple(shape) == (5, 7)
    with pytest.raises(ValueError, match="^weight must have shape"):
        ops.rms_norm(x, t(8), 0.5)
    # Inside torch.compile a call of the function is traced as the op (no graph break).
    compiled = torch.compile(lambda a, b: fns[1](a, b), fullgraph=True, backend="eager")
    launches = len(fake.launches)
    assert compiled(t(4, 32), t(16, 32)).shape == (4, 16)
    assert len(fake.launches) == launches + 1


LEAD = OpSchema(
    "add", "x[*M, N]: T, y[*M, N]: T, i[M]: i32 -> z[*M, N]: T", dtypes={"T": ("bf16",)}
)


def test_leading_dims_of_several_inputs_must_agree(fake) -> None:
    """Each ``*M`` input's leading dims (and any later ``M`` dim) must give the same M: bind used
    to keep the first input's M and launch with it, past the end of a shorter second input."""
    op = schema_op(LEAD)
    i6 = t(6, dtype=torch.int32)
    z = op(t(2, 3, 8), t(6, 8), i6)  # the same M = 6 (each viewed as [M, N])
    assert z.shape == (2, 3, 8) and fake.launches[-1].shapes == (6, 8, 6, 8, 6, 6, 8)
    with pytest.raises(ValueError, match=r"^y must have shape \(2, 3, 8\) to match x \(2, 3, 8\) "):
        op(t(2, 3, 8), t(5, 8), i6)  # any leading dims of 6 elements would do (said after)
    with pytest.raises(ValueError, match=r"^i must have shape \(6,\) to match x \(2, 3, 8\)"):
        op(t(2, 3, 8), t(6, 8), t(5, dtype=torch.int32))
    assert len(fake.launches) == 1


def test_dlpack_arrays(fake) -> None:
    """Other frameworks' arrays (here numpy's, through DLPack) go through `_arrays.call`."""
    np = pytest.importorskip("numpy")
    x, w = np.ones((4, 64), np.float32), np.ones(64, np.float32)
    y = schema_op(RMS_NORM)(x, w, 1e-5)
    assert type(y) is np.ndarray and y.shape == (4, 64) and y.dtype == np.float32
    (launch,) = fake.launches
    assert launch.ptrs == (x.ctypes.data, w.ctypes.data, y.ctypes.data)
    assert launch.shapes == (4, 64, 64, 4, 64) and launch.scalars == (1e-5,)


@pytest.mark.parametrize(
    "schema, args",
    [
        (RMS_NORM, (t(7, 64), t(64), 1e-5)),
        (GEMM, (t(9, 64), t(32, 64))),
        (SWIGLU, (t(5, 128),)),
        (LEAD, (t(6, 8), t(6, 8), t(6, dtype=torch.int32))),
    ],
)
def test_the_short_path_passes_what_the_checked_path_launched(module_fake, schema, args) -> None:
    """With a module-typed `_C` (the only kind `_lib.learn` trusts): the first call launches
    and learns, the next ones are one `_C.call` each with the launch's tensors, shapes and
    scalars and the schema's output bits (test_short_path.py does this for tileaot's ops)."""
    op = schema_op(schema)
    op(*args)
    ((handle, _, _, ptrs, shapes, scalars),) = module_fake.launches
    n_in = len(schema.inputs)
    for out in (None, op(*args)):  # allocated by the short path, then given
        got = op(*args, out=out)
        (h, tensors, given_scalars, outputs) = module_fake.calls[-1]
        assert (h, given_scalars, outputs) == (handle, scalars, schema.writes)
        assert tuple(x.data_ptr() for x in tensors[:n_in]) == ptrs[:n_in]
        assert tensors[n_in] is got and (out is None or got is out)
        assert tuple(s for x in tensors for s in x.shape) == shapes
    assert len(module_fake.launches) == 1 and len(module_fake.calls) == 3
