"""The op schemas (python/tileaot/_schema.py) and what is derived from them.

Every op with a `SCHEMA` is checked here once, parametrized: the grammar reads back, the launch
is straight-line code in the kernel's order, the short path's output bits, the `info` example,
the torch custom-op arguments and fake, and (with tilelang) the traced kernel signature of every
variant against the schema — the check `build_tools generate` runs on every build.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from _fakes import STREAM, cpu_as_cuda, fake, t, tileaot  # noqa: F401 - fixtures
from _lowering import needs_tilelang

torch = pytest.importorskip("torch")
_schema = importlib.import_module("tileaot._schema")
OpSchema = _schema.OpSchema

# Ops whose wrappers run through their schema (the rest follow; see docs/ADDING_AN_OP.md).
SCHEMA_OPS = ("rms_norm", "gemm", "swiglu", "engram_gate")


def _module(op: str):
    return importlib.import_module(f"tileaot.{op}")


@pytest.mark.parametrize("op", SCHEMA_OPS)
def test_every_listed_op_has_its_schema(op):
    schema = _module(op).SCHEMA
    assert schema.op == op and schema.tensors


def test_the_grammar_reads_back():
    s = OpSchema(
        "demo",
        "x[*M, 2*H]: T, w?[H]: fp32 -> y[*M, H]: T as out, s[*M, H // 128]: fp32,"
        " scratch tmp[64]: i32; eps: float32, n: int32",
        dtypes={"T": ("bf16", "fp16")},
        example={"M": 2, "H": 256},
    )
    names = [(t.name, t.role, t.optional, t.api) for t in s.tensors]
    assert names == [
        ("x", "in", False, "x"),
        ("w", "in", True, "w"),
        ("y", "out", False, "out"),
        ("s", "out", False, "s"),
        ("tmp", "scratch", False, "tmp"),
    ]
    assert s.scalars == (("eps", "float32"), ("n", "int32"))
    assert s.writes == 0b11100
    assert s.flat({"M": 2, "H": 256}) == (2, 512, 256, 2, 256, 2, 2, 64)
    assert s.example_shapes("bf16") == ("x[2, 2 * 256]", (2, 512, 256, 2, 256, 2, 2, 64))
    with pytest.raises(ValueError, match="unknown dtype"):
        OpSchema("bad", "x[N]: Q -> y[N]: Q")


def test_the_launcher_is_straight_line_code_in_kernel_order():
    src = _module("rms_norm").SCHEMA.launcher().__source__
    assert "for " not in src and "if " not in src
    assert "(x.data_ptr(), weight.data_ptr(), y.data_ptr(),), (M, N, N, M, N,), (eps, )" in src


# What the hand-written wrappers passed before the schema (the golden record holds the rest).
EXAMPLES = {
    "rms_norm": ("x[4096, 4096]", (4096,) * 5),
    "gemm": ("a[4096, 4096] b[4096, 4096]", (4096,) * 6),
    "swiglu": ("x[4096, 2 * 2048]", (4096, 4096, 4096, 2048)),
    "engram_gate": (
        "h[16384, 7168] k[16384, 7168] v[16384, 7168] w_h[4, 7168] w_k[4, 7168]",
        (16384, 7168) * 3 + (4, 7168) * 2 + (16384, 7168, 16384),
    ),
}
WRITES = {"rms_norm": 0b100, "gemm": 0b100, "swiglu": 0b10, "engram_gate": 0b1100000}
TORCH_ARGS = {
    "rms_norm": "Tensor x, Tensor weight, float eps=1e-06",
    "gemm": "Tensor a, Tensor b",
    "swiglu": "Tensor x",
    "engram_gate": "Tensor h, Tensor k, Tensor v, Tensor w_h, Tensor w_k, float eps=1e-06, "
    "float clamp_value=1e-06",
}


@pytest.mark.parametrize("op", SCHEMA_OPS)
def test_derived_facts(op):
    schema = _module(op).SCHEMA
    assert schema.example_shapes(schema.dtypes["T"][0]) == EXAMPLES[op]
    assert schema.writes == WRITES[op]
    specs = importlib.import_module("tileaot.torch_ops._specs")
    (spec,) = [s for s in specs.SPECS if s.name == op]
    assert spec.args == TORCH_ARGS[op] and spec.outs == schema.torch_outs()


@pytest.mark.parametrize(
    ("op", "args", "want"),
    [
        ("rms_norm", lambda: (t(3, 5, 64), t(64), 1e-6), [(3, 5, 64)]),
        ("gemm", lambda: (t(7, 32), t(16, 32)), [(7, 16)]),
        ("swiglu", lambda: (t(2, 3, 64),), [(2, 3, 32)]),
    ],
)
def test_fakes_give_the_shapes_the_wrappers_allocate(op, args, want):
    specs = importlib.import_module("tileaot.torch_ops._specs")
    (spec,) = [s for s in specs.SPECS if s.name == op]
    got = spec.fake(*args())
    got = got if isinstance(got, tuple) else (got,)
    assert [tuple(g.shape) for g in got] == want and all(g.dtype == torch.bfloat16 for g in got)


def test_bind_names_the_argument_and_the_tied_size():
    schema = _module("rms_norm").SCHEMA
    with pytest.raises(ValueError, match=r"weight must have shape \(64,\) to match x \(3, 64\)"):
        schema.bind({"x": t(3, 64), "weight": t(32)})
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., N\); got a 0-d tensor"):
        schema.bind({"x": torch.tensor(1.0).bfloat16(), "weight": t(32)})
    with pytest.raises(TypeError, match="weight has dtype torch.float32; it must match x"):
        schema.bind({"x": t(3, 64), "weight": t(64, dtype=torch.float32)})
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 2\*H\): its dim -1 is 7"):
        _module("swiglu").SCHEMA.bind({"x": t(2, 7)})


def test_bind_takes_the_leading_dims_of_the_first_lead_input(cpu_as_cuda):  # noqa: F811
    """Several ``*`` names (engram_gate: h's M, v's MV, the weights' GW): the outputs' leading
    dims are h's, in the generated bind as in bind_checked."""
    schema = _module("engram_gate").SCHEMA
    args = {"h": t(2, 4, 64), "k": t(2, 4, 64), "v": t(2, 1, 64), "w_h": t(64), "w_k": t(64)}
    fast, slow = schema.bind(args), schema.bind_checked(args)
    assert fast == slow and fast.lead == (2, 4)
    assert fast.dims == {"M": 8, "H": 64, "MV": 2, "GW": 1}


def _params(schema, dtype="bfloat16", **fixed):
    """A traced-signature stand-in (build_tools.trace.Param as a dict) for `schema`."""
    out = []
    for ts in schema.tensors:
        shape = [fixed.get(d.name, f"d_{d.name}") if d.name else d.text for d in ts.dims]
        out.append({"name": ts.name, "kind": "tensor", "dtype": dtype, "shape": shape})
    return out + [{"name": n, "kind": "scalar", "dtype": c, "shape": []} for n, c in schema.scalars]


def test_check_signature_finds_each_kind_of_drift():
    schema = _module("rms_norm").SCHEMA
    key = {"dtype": "bfloat16"}
    schema.check_signature(_params(schema), key, {})
    schema.check_signature(_params(schema, N=4096), key, {"N": 4096})
    renamed = _params(schema)
    renamed[2]["name"] = "out"
    with pytest.raises(ValueError, match="kernel parameters"):
        schema.check_signature(renamed, key, {})
    with pytest.raises(ValueError, match="tensor x has dtype float16, the schema bfloat16"):
        schema.check_signature(_params(schema, dtype="float16"), key, {})
    with pytest.raises(ValueError, match="dim N is 2048 in the kernel, 4096 here"):
        schema.check_signature(_params(schema, N=2048), key, {"N": 4096})
    short = _params(schema)
    short[1]["shape"] = []
    with pytest.raises(ValueError, match="tensor weight has rank 0"):
        schema.check_signature(short, key, {})


@needs_tilelang
@pytest.mark.parametrize("op", SCHEMA_OPS)
def test_every_traced_variant_matches_its_schema(op):
    """The build-time check on the real kernels (sm_80 lowering; the signature is arch-free)."""
    from build_tools.matrix import enumerate_variants
    from build_tools.schema_check import schema_of
    from build_tools.trace import signature_of

    points = enumerate_variants(
        importlib.import_module("kernels_py").all_specs(), ("sm_80",), (f"{op}_*",)
    )
    points = [p for p in points if p.spec.op == op]  # "swiglu_*" also selects swiglu_per_token…
    assert points, op
    schema = schema_of(op)
    for p in points:
        func = p.spec.factory(arch="sm_80", **p.key, **p.specialisation)
        sig = signature_of(func)
        params = [vars(x) for x in sig.params]
        schema.check_signature(params, p.key, p.specialisation)


def test_the_schema_module_stays_torch_free():
    code = "import sys, tileaot._schema, tileaot.rms_norm; assert 'torch' not in sys.modules"
    src = str(Path(inspect.getfile(_schema)).parents[1])
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": src})
