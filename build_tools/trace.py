"""Lower one variant for one arch with TileLang and extract what the launcher needs.

Output is plain data (strings, ints, lists), so emitting and the manifest never touch TIR:
the device source, and per kernel its symbol, launch geometry as C++ expressions over the
call's sizes, dynamic shared memory, flags and the argument list (pointers, sizes, scalars,
TMA descriptors). Names used in the C++ expressions:
``a.ptrs[i]`` (tensor i), ``d_<var>`` (a dynamic size, int64_t), ``a.scalars[j]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tilelang
from tilelang import tvm
from tvm.target import Target

from build_tools.cexpr import free_vars, pystr, to_cpp
from build_tools.matrix import VariantPoint
from build_tools.smem_slots import canonical_source

tirx = tvm.tirx

# TVM dtype → C++ type of a kernel parameter passed by value.
_SCALAR_CTYPE = {
    "int32": "int32_t",
    "int64": "int64_t",
    "uint32": "uint32_t",
    "float32": "float",
    "float64": "double",
    "bool": "bool",
}


@dataclass
class Param:
    name: str
    kind: str  # "tensor" or "scalar"
    dtype: str
    shape: list = field(default_factory=list)  # ints and C++ expressions (strings) over d_*
    data: str = ""  # name of the buffer's data pointer in TileLang's host code
    shape_text: list = field(default_factory=list)  # the shape as TileLang prints it


@dataclass
class Signature:
    """Arch-independent view of the prim_func: tensors, scalars, dynamic sizes."""

    params: list[Param]
    dyn: list[str]  # dynamic size variables, in order of first whole-dim use
    binds: list[tuple[int, str]]  # (flat shape index, var) for the first whole-dim use
    checks: list[tuple[int, str]]  # (flat shape index, C++ expr it must equal)

    def text(self) -> str:
        def one(p: Param) -> str:
            if p.kind == "scalar":
                return p.name
            dims = ",".join(p.shape_text)
            return f"{p.name}[{dims}]"

        return " ".join(one(p) for p in self.params)


def signature_of(func) -> Signature:
    params, dyn, binds, checks = [], [], [], []
    flat = 0
    name_of = "d_{}".format
    pending = []
    for p in func.params:
        if p not in func.buffer_map:
            params.append(Param(pystr(p.name), "scalar", pystr(p.dtype)))
            continue
        buf = func.buffer_map[p]
        shape = []
        for dim in buf.shape:
            if isinstance(dim, tirx.IntImm):
                shape.append(int(dim.value))
                checks.append((flat, f"int64_t({int(dim.value)})"))
            elif isinstance(dim, tirx.Var) and pystr(dim.name) not in dyn:
                dyn.append(pystr(dim.name))
                binds.append((flat, pystr(dim.name)))
                shape.append(name_of(pystr(dim.name)))
            else:
                text = to_cpp(dim, name_of)
                shape.append(text)
                pending.append((flat, text, dim))
            flat += 1
        text = [pystr(d) for d in buf.shape]
        params.append(
            Param(pystr(buf.name), "tensor", pystr(buf.dtype), shape, pystr(buf.data.name), text)
        )
    for index, text, dim in pending:
        unbound = free_vars(dim) - set(dyn)
        if unbound:
            raise ValueError(f"shape dim {dim} uses {unbound}, which no whole dimension binds")
        checks.append((index, text))
    return Signature(params, dyn, binds, checks)


def lower(func, arch: str):
    target = Target({"kind": "cuda", "arch": arch})
    with tvm.transform.PassContext(opt_level=3), target:
        return tilelang.lower(func, target=target)


def _host_calls(host_func) -> dict[str, list]:
    """Kernel name → the argument expressions of its call_packed in the host function."""
    calls: dict[str, list] = {}
    packed = tvm.ir.Op.get("tirx.tvm_call_packed")

    def visit(node):
        if isinstance(node, tirx.Call) and node.op.same_as(packed):
            name = pystr(node.args[0].value)
            if not name.startswith("__tvm"):
                calls[name] = list(node.args[1:])

    tirx.stmt_functor.post_order_visit(host_func.body, visit)
    return calls


def _tma_desc(args, name_of) -> dict:
    """TileLang's __tvm_tensormap_create_tiled arguments as C++ expressions."""
    kind = pystr(args[0].value)
    if kind != "__tvm_tensormap_create_tiled":
        raise ValueError(f"unsupported TMA descriptor kind {kind}")
    dtype, rank = int(args[2].value), int(args[3].value)
    rest = args[5:]

    def exprs(i):
        return [to_cpp(e, name_of) for e in rest[i * rank : (i + 1) * rank]]

    tail = [int(e.value) for e in rest[4 * rank : 4 * rank + 4]]
    return {
        "dtype": dtype,
        "rank": rank,
        "address": to_cpp(args[4], name_of),
        "dims": exprs(0),
        # TileLang lists the element size first; the driver takes the rank-1 outer strides.
        "strides": exprs(1)[1:],
        "box": exprs(2),
        "elem_strides": exprs(3),
        "interleave": tail[0],
        "swizzle": tail[1],
        "l2_promotion": tail[2],
        "oob_fill": tail[3],
    }


def _kernel_facts(kname, kfunc, call_args, host_attrs, sig: Signature) -> dict:
    tensors = [p for p in sig.params if p.kind == "tensor"]
    tensor_index = {p.data: i for i, p in enumerate(tensors)}
    scalars = [p.name for p in sig.params if p.kind == "scalar"]
    tma_args = {
        pystr(var.name): list(a) for var, a in host_attrs.get("tma_descriptor_args", {}).items()
    }

    def name_of(var: str) -> str:
        if var in sig.dyn:
            return f"d_{var}"
        if var in tensor_index:
            return f"a.ptrs[{tensor_index[var]}]"
        if var in scalars:
            return f"a.scalars[{scalars.index(var)}]"
        raise ValueError(f"{kname}: launch uses unknown variable {var}")

    attrs = kfunc.attrs
    extent = dict(attrs["thread_extent"]) if "thread_extent" in attrs else {}
    grid = [to_cpp(extent.get(f"blockIdx.{c}", 1), name_of) for c in "xyz"]
    block = [to_cpp(extent.get(f"threadIdx.{c}", 1), name_of) for c in "xyz"]
    args = []
    for param, value in zip(kfunc.params, call_args[: len(kfunc.params)], strict=True):
        if pystr(param.name) in tma_args:
            args.append({"kind": "tma", "desc": _tma_desc(tma_args[pystr(param.name)], name_of)})
        elif str(param.dtype) == "handle":
            args.append({"kind": "ptr", "value": to_cpp(value, name_of)})
        else:
            ctype = _SCALAR_CTYPE[str(param.dtype)]
            args.append({"kind": "value", "ctype": ctype, "value": to_cpp(value, name_of)})
    cluster = [int(c) for c in attrs["cluster_dims"]] if "cluster_dims" in attrs else [1, 1, 1]
    return {
        "symbol": pystr(kname),
        "grid": grid,
        "block": block,
        "smem": int(attrs["dyn_shared_memory_buf"]) if "dyn_shared_memory_buf" in attrs else 0,
        "pdl": "has_cuda_pdl_sync" in attrs,
        "cooperative": bool(attrs["use_cooperative_groups"])
        if "use_cooperative_groups" in attrs
        else False,
        "cluster": cluster,
        "args": args,
    }


def trace(point: VariantPoint, arch: str) -> tuple[Signature, dict]:
    """Lower `point` for `arch`: (signature, {"source": ..., "kernels": [...]})."""
    func = point.spec.factory(arch=arch, **point.key, **point.specialisation)
    func = func.with_attr("global_symbol", point.name)
    sig = signature_of(func)
    artifact = lower(func, arch)
    # Same-named shared buffers (reduction workspaces) get slots by heap address in TileLang
    # 0.1.15; canonical_source fixes one equivalent assignment (build_tools/smem_slots.py).
    source = canonical_source(artifact)
    return sig, {"source": source, "kernels": kernels_of(artifact, sig)}


def kernels_of(artifact, sig: Signature) -> list[dict]:
    """Launch facts of every kernel of a lowered artifact, in launch order (any target kind:
    build_tools/hip.py reads HIP artifacts with it too)."""
    (host_func,) = artifact.host_mod.functions.values()
    host_attrs = dict(host_func.attrs)
    calls = _host_calls(host_func)
    # Launch order is the order of the calls in the host function, as TileLang's wrapper does.
    host_text = str(host_func)
    names = sorted(
        (pystr(gv.name_hint) for gv in artifact.device_mod.functions),
        key=lambda n: host_text.index(f'"{n}"'),
    )
    return [_kernel_facts(n, artifact.device_mod[n], calls[n], host_attrs, sig) for n in names]
