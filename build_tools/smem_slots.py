"""Canonical shared-memory slots: traced sources that do not depend on heap addresses.

TileLang 0.1.15 packs a kernel's shared buffers into one dynamic arena
(MergeSharedMemoryAllocations). It orders buffers by (first use, last use, name) and breaks
the remaining ties in the iteration order of a map keyed by node addresses. Ties happen
between buffers of one name, above all the ``workspace`` that every cross-thread
``T.reduce_*`` allocates: all are named "workspace", all are allocated at the kernel's root,
and liveness there is counted per top-level statement, so the reductions of one row loop or
one ``if`` branch share a live range. Shared buffers of a macro that runs twice (one name,
e.g. per_block_cast_fp8's ``partial``) can tie the same way. Which of them gets which slot
then follows the heap layout of the process (tile-ai/tilelang PR #3108): engram_gate
(generic) and engram_gate_backward gave a different source, hence a different cubin, on
most runs.

Why here and not in the kernels: the workspaces are TileLang's, created during lowering;
a kernel can neither name nor place them, and it needs its several row sums inside the row
loop. Folding them into one reduction over a stacked fragment is rejected by TileLang's
layout inference (a fragment indexed by a constant inside ``T.Parallel``) and would change
the emitted summation code, which the GPU bit-exactness tests pin.

`canonical_source` picks one of the equivalent forms, deterministically, for each family of
same-named aliases of the dynamic arena (TIR `handle_add_byte_offset` binds):

* names: the alias the kernel uses first gets the family's first name (in the order codegen
  hands out suffixes), the next the next, ... This is consistent renaming, always safe; it is
  all that aliases of one address (a slot TileLang reuses for several reductions, whose
  alias names varied on sm_80 and sm_100a) need.
* slots: within a group of *exchangeable* members, the one used first also gets the group's
  lowest offset, and so on. Members are exchangeable when they share element type and byte
  size (sized by their `DeclBuffer`s and `tvm_access_ptr` extents, the sizes the planner
  itself used) and each owns its slot: no other alias of the kernel overlaps it, whatever
  its live range, and the arena is reached only through the aliases (checked in the source).

Why moving exchangeable members keeps what the kernel computes: giving two of them each
other's slot maps the arena onto itself (slot A <-> slot B, all else fixed). Every access goes
through the buffer's own pointer and stays within its size, and no other buffer shares those
bytes, so every load returns the same value as before. Which accesses conflict is unchanged
too (accesses to two such buffers never overlapped, and still do not), so the barriers
TileLang placed for the original assignment still suffice. Same-name buffers share alignment
needs (TileLang keys them by name). Slots that fail a check keep their pointers; a kernel
whose source does not match its TIR is left as TileLang wrote it.
tests/test_trace_determinism.py reports any variant whose source still varies. Applied to
CUDA and HIP sources (build_tools/hip.py) alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """One alias of a kernel's dynamic shared-memory arena, as the lowered TIR declares it."""

    name: str  # TIR name, before codegen makes it unique ("workspace" for all reductions)
    dtype: str
    offset: int  # bytes into the arena
    size: int | None  # bytes; None when some access has no constant extent


def canonical_source(artifact) -> str:
    """`artifact.kernel_source` with same-named shared buffers in canonical names and slots."""
    from build_tools.cexpr import pystr

    source = pystr(artifact.kernel_source)
    for gv, func in artifact.device_mod.functions.items():
        source = canonical_kernel(source, pystr(gv.name_hint), arena_slots(func))
    return source


def arena_slots(func) -> list[Slot]:
    """The arena aliases of a lowered device PrimFunc, with their sizes in bytes."""
    from tilelang import tvm

    from build_tools.cexpr import pystr

    tirx = tvm.tirx
    aliases: list[tuple] = []  # (var, name, dtype, offset) of each arena alias
    extents: list[tuple] = []  # (data var, bytes or None, through an access_ptr?)
    var_uses: list = []  # every Var in expression position, to find raw pointer uses

    def visit(node) -> None:
        if isinstance(node, tirx.Bind) and _is_call(node.value, "tirx.handle_add_byte_offset"):
            base, offset = node.value.args
            if _in_dynamic_arena(base) and isinstance(offset, tirx.IntImm):
                dtype = pystr(node.var.type_annotation.element_type)
                aliases.append((node.var, pystr(node.var.name), dtype, int(offset.value)))
        elif isinstance(node, tirx.DeclBuffer):
            nbytes = _const_bytes(node.buffer.shape, node.buffer.dtype)
            extents.append((node.buffer.data, nbytes, False))
        elif _is_call(node, "tirx.tvm_access_ptr"):
            ptype, data, offset, extent, _ = node.args
            end = _const_int(offset) + _const_int(extent) if _all_int(offset, extent) else None
            nbytes = None if end is None else end * tvm.DataType(str(ptype.dtype)).itemsize
            extents.append((data, nbytes, True))
        elif isinstance(node, tirx.Var):
            var_uses.append(node)

    tirx.stmt_functor.post_order_visit(func.body, visit)
    slots = []
    for var, name, dtype, offset in aliases:
        sizes = [n for v, n, _ in extents if v.same_as(var)]
        # A raw use of the pointer (not through an access_ptr) has no known extent.
        sized_uses = sum(1 for v, _, is_ptr in extents if is_ptr and v.same_as(var))
        raw_uses = sum(1 for v in var_uses if v.same_as(var)) - sized_uses
        known = sizes and None not in sizes and raw_uses == 0
        slots.append(Slot(name, dtype, offset, max(sizes) if known else None))
    return slots


def canonical_kernel(source: str, kernel: str, slots: list[Slot]) -> str:
    """`source` with kernel `kernel`'s same-named arena aliases in canonical names and slots."""
    span = _kernel_span(source, kernel)
    if span is None or len(slots) < 2:
        return source
    start, end = span
    body = source[start:end]
    decls = {m.group(2): int(m.group(3)) for m in _ALIAS_DECL.finditer(body)}
    if len(decls) != len(slots) or body.count("buf_dyn_shmem") != len(decls) + 1:
        return source  # not the arena layout this module understands: leave it alone
    families: dict[tuple, list[Slot]] = {}
    for s in slots:
        families.setdefault((s.name, s.dtype), []).append(s)
    owner = {name: [f for f in families if _codegen_name_of(name, f[0])] for name in decls}
    if any(len(fs) != 1 for fs in owner.values()):
        return source  # a source name that no TIR name (or two) explains
    movable = exchangeable_groups(slots)
    for family, members in families.items():
        names = [n for n, fs in owner.items() if fs[0] == family]
        if sorted(decls[n] for n in names) != sorted(s.offset for s in members):
            return source
        if len(names) < 2:
            continue
        by_offset = {decls[n]: n for n in names}
        groups = [[by_offset[s.offset] for s in g] for g in movable if g[0] in members]
        body = _canonical_family(body, {n: decls[n] for n in names}, groups)
    return source[:start] + body + source[end:]


def exchangeable_groups(slots: list[Slot]) -> list[list[Slot]]:
    """Groups (2+) of same name, dtype and size whose members each own their bytes."""
    if any(s.size is None for s in slots):
        return []  # an unknown extent could reach any slot

    def owns(s: Slot) -> bool:
        return not any(
            o is not s and o.offset < s.offset + s.size and s.offset < o.offset + o.size
            for o in slots
        )

    groups: dict[tuple, list[Slot]] = {}
    for s in slots:
        groups.setdefault((s.name, s.dtype, s.size), []).append(s)
    return [g for g in groups.values() if len(g) > 1 and all(owns(s) for s in g)]


# Codegen's alias of the arena: `void* pacc = ((void*)((char*)buf_dyn_shmem + 0));`
# (the same text for CUDA and HIP).
_ALIAS_DECL = re.compile(
    r"^([ \t]*)void\* (\w+) = \(\(void\*\)\(\(char\*\)buf_dyn_shmem \+ (\d+)\)\);$", re.M
)


def _canonical_family(body: str, offsets: dict[str, int], movable: list[list[str]]) -> str:
    """One family of same-named aliases (`offsets`: source name -> offset).

    Names by first use: the i-th member the code uses gets the i-th name in codegen order
    (consistent renaming). Each `movable` group (exchangeable slots) also has its offsets
    dealt by first use, lowest first. The family's declarations are rewritten in place, in
    name order; the same pointers then carry the same names in every run."""
    names = list(offsets)
    decl_spans = [m.span() for m in _ALIAS_DECL.finditer(body) if m.group(2) in offsets]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    first: dict[str, int] = {}
    for m in pattern.finditer(body):
        if not any(a <= m.start() < b for a, b in decl_spans):
            first.setdefault(m.group(1), m.start())
    by_use = sorted(names, key=lambda n: (first.get(n, len(body)), n))
    new_offset = dict(offsets)
    for group in movable:
        in_use_order = [n for n in by_use if n in group]
        for n, o in zip(in_use_order, sorted(offsets[n] for n in group), strict=True):
            new_offset[n] = o
    canonical = sorted(names, key=_codegen_order)
    rename = dict(zip(by_use, canonical, strict=True))
    indent = _ALIAS_DECL.search(body, decl_spans[0][0]).group(1)
    new_decls = [
        f"{indent}void* {rename[n]} = ((void*)((char*)buf_dyn_shmem + {new_offset[n]}));"
        for n in by_use
    ]
    new_decls.sort(key=lambda line: _codegen_order(line.split()[1]))
    out, pos = [], 0
    for (a, b), decl in zip(decl_spans, new_decls, strict=True):
        out.append(pattern.sub(lambda m: rename[m.group(1)], body[pos:a]))
        out.append(decl)
        pos = b
    out.append(pattern.sub(lambda m: rename[m.group(1)], body[pos:]))
    return "".join(out)


def _codegen_name_of(name: str, tir_name: str) -> bool:
    """Whether codegen may have named an alias of TIR name `tir_name` `name`: as it is, or
    made unique with a numeric suffix."""
    return name == tir_name or re.fullmatch(re.escape(tir_name) + r"_\d+", name) is not None


def _codegen_order(name: str) -> tuple[int, str]:
    """workspace < workspace_1 < ... < workspace_10: the order codegen hands out suffixes."""
    return len(name), name


def _kernel_span(source: str, kernel: str) -> tuple[int, int] | None:
    """Where kernel `kernel`'s definition starts and the next kernel's (or the end) starts.
    Definitions, not the prototypes TileLang puts first: their line ends with the brace."""
    heads = list(re.finditer(r'^extern "C" __global__ .*\{$', source, re.M))
    named = re.compile(r"\b" + re.escape(kernel) + r"\(")
    for i, m in enumerate(heads):
        if named.search(m.group(0)):
            return m.start(), heads[i + 1].start() if i + 1 < len(heads) else len(source)
    return None


def _is_call(node, op: str) -> bool:
    from tilelang import tvm

    return isinstance(node, tvm.tirx.Call) and getattr(node.op, "name", None) == op


def _in_dynamic_arena(base) -> bool:
    annotation = getattr(base, "type_annotation", None)
    return getattr(annotation, "storage_scope", None) == "shared.dyn"


def _all_int(*exprs) -> bool:
    from tilelang import tvm

    return all(isinstance(e, tvm.tirx.IntImm) for e in exprs)


def _const_int(expr) -> int:
    return int(expr.value)


def _const_bytes(shape, dtype) -> int | None:
    from tilelang import tvm

    if not _all_int(*shape):
        return None
    count = 1
    for dim in shape:
        count *= _const_int(dim)
    return count * tvm.DataType(str(dtype)).itemsize
