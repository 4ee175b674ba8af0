"""KernelSpec: what build_tools needs to know about one op.

A kernel module (one op per file) exposes ``SPEC = KernelSpec(...)``. The build enumerates
``keys × specs × archs``; each point is one *variant* whose procedural name
(``rms_norm_bf16_n4096``) is registry key, symbol prefix and filter glob at once.

Conventions the generator and runtime rely on:

* ``factory(arch=..., **key, **spec)`` returns a TileLang ``T.prim_func``. Its parameters are
  the op's tensors (in call order), then its runtime scalars (``T.float32`` etc.).
* Dynamic sizes are ``T.dynamic("M")`` variables used in tensor shapes; every dynamic variable
  must appear as a whole dimension of some tensor, so the runtime can read it off the shapes.
* A specialisation fixes some of those sizes to constants (``{"N": 4096}``); the generic
  variant (``{}``) leaves them dynamic. The runtime picks the first variant whose shape
  pattern matches, specialised ones first.
* ``constraints(key, spec)`` names divisibility requirements on dynamic sizes (``{"K": 8}``):
  a variant only matches calls that satisfy them, and the Python layer reports violations.
* ``spec_error(key, spec)`` says why a specialisation cannot be built (a one-line reason), or
  None: config tools check asked-for sizes with it before tracing.
* ``lowering_classes`` groups archs whose traces of a variant are identical (device source,
  launch facts, signature): the build traces one arch of a group and compiles that source for
  every arch of it (build_tools/lowering.py). Default: every arch traced on its own.
  ``python -m build_tools verify-lowering-classes`` checks a declaration by tracing each arch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Short names used in variant names and dispatch keys.
DTYPE_SHORT = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "float8_e4m3": "e4m3",
    "float8_e4m3fn": "e4m3",
    "int32": "i32",
    "uint8": "u8",
}

# The GPU targets the default build compiles, in the SASS naming of DESIGN.md. sm_86 and sm_89
# GPUs run the sm_80 cubins (the runtime takes a plain target of the same major and a lower
# minor), and tracing them separately produced sources identical to sm_80's for every variant
# (the 2026-11-29 full build) at 2/7 of the build time: build them only on request
# (TILEAOT_ARCHS=...;86;89).
# Blackwell is built as family targets (CUDA 12.9): sm_100f runs on 10.0 (B200, GB200) and 10.3
# (B300, GB300), sm_120f on 12.0 (RTX 50, RTX PRO 6000) and 12.1 (DGX Spark). No kernel here
# uses an sm_100a-only feature (tcgen05 through tensor memory, which TileLang emits only for
# T.gemm with a tensor-memory accumulator; gemm.py has none), so sm_100a is buildable on request
# only. sm_90a stays an "a" target: gemm's Hopper path issues wgmma, which exists in sm_90a only
# (and 9.0 is the only Hopper compute capability, so nothing is lost).
# BUILDABLE_ARCHS is everything a build can target.
DEFAULT_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_90a", "sm_100f", "sm_120f")
BUILDABLE_ARCHS = (
    "sm_70",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_89",
    "sm_90a",
    "sm_100a",
    "sm_100f",
    "sm_103a",
    "sm_120f",
    "sm_120a",
    "sm_121a",
)


# Lowering classes (KernelSpec.lowering_classes): groups of archs whose lowering of a variant
# is identical. Only default archs appear: a group holds archs that verify-lowering-classes has
# traced and compared; any other arch (sm_86, sm_103a, a HIP target) is traced on its own.
EVERY_ARCH_SEPARATE: tuple[tuple[str, ...], ...] = ()
ALL_CUDA_SAME: tuple[tuple[str, ...], ...] = (DEFAULT_ARCHS,)
BY_GENERATION: tuple[tuple[str, ...], ...] = (
    ("sm_70", "sm_75"),
    ("sm_80", "sm_90a"),
    ("sm_100f", "sm_120f"),
)

# Some fp32 vector arithmetic is packed in pairs (tl::add2 and friends) from sm_100 on.
SPLIT_AT_SM100: tuple[tuple[str, ...], ...] = (
    ("sm_70", "sm_75", "sm_80", "sm_90a"),
    ("sm_100f", "sm_120f"),
)
# Kernels of one prim_func chained with programmatic dependent launch from sm_90 on.
SPLIT_AT_SM90: tuple[tuple[str, ...], ...] = (
    ("sm_70", "sm_75", "sm_80"),
    ("sm_90a", "sm_100f", "sm_120f"),
)

ArchGroups = tuple[tuple[str, ...], ...]


def _always(arch: str, key: Mapping[str, str], spec: Mapping[str, int]) -> bool:
    return True


def _no_constraints(key: Mapping[str, str], spec: Mapping[str, int]) -> dict[str, int]:
    return {}


def _no_spec_error(key: Mapping[str, str], spec: Mapping[str, int]) -> str | None:
    return None


@dataclass(frozen=True)
class KernelSpec:
    """Everything the build needs to enumerate, trace and test one op."""

    op: str
    factory: Callable[..., Any]
    # Non-shape choices: dtypes and modes. Each dict is one dispatch key; its values, in
    # insertion order, form the key string ("bf16" or "bf16,g128").
    keys: tuple[Mapping[str, str], ...]
    # Shape specialisations; {} is the generic (all-runtime) variant and must be present.
    specs: tuple[Mapping[str, int], ...]
    reference: Callable[..., Any]
    # Which archs a (key, spec) is built for (e.g. a wgmma config only on sm_90a).
    supports: Callable[[str, Mapping[str, str], Mapping[str, int]], bool] = _always
    constraints: Callable[[Mapping[str, str], Mapping[str, int]], dict[str, int]] = _no_constraints
    # Why a (key, spec) cannot be built, or None (e.g. a static size out of the kernel's range).
    spec_error: Callable[[Mapping[str, str], Mapping[str, int]], str | None] = _no_spec_error
    # Archs sharing one trace: a constant above, or (key, spec) -> groups where an op's
    # variants differ. lowering_reason says in one line why the lowering cannot differ.
    lowering_classes: ArchGroups | Callable[[Mapping[str, str], Mapping[str, int]], ArchGroups] = (
        EVERY_ARCH_SEPARATE
    )
    lowering_reason: str = ""
    doc: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def lowering_groups(self, key: Mapping[str, str], spec: Mapping[str, int]) -> ArchGroups:
        """The declared arch groups of one variant, checked: known archs, no arch twice."""
        groups = self.lowering_classes
        groups = groups(key, spec) if callable(groups) else groups
        seen: list[str] = [a for g in groups for a in g]
        unknown = sorted(set(seen) - set(BUILDABLE_ARCHS))
        twice = sorted({a for a in seen if seen.count(a) > 1})
        if unknown or twice:
            raise ValueError(
                f"{self.op}: lowering_classes {groups!r} name unknown archs {unknown} or "
                f"archs in two groups {twice}: each arch at most once, from BUILDABLE_ARCHS"
            )
        if any(len(g) > 1 for g in groups) and not self.lowering_reason:
            raise ValueError(f"{self.op}: lowering_classes needs a lowering_reason (one line)")
        return tuple(tuple(g) for g in groups)

    def key_string(self, key: Mapping[str, str]) -> str:
        return ",".join(short(v) for v in key.values())

    def variant_name(self, key: Mapping[str, str], spec: Mapping[str, int]) -> str:
        parts = [self.op, *(short(v) for v in key.values())]
        parts += [f"{k.lower()}{v}" for k, v in spec.items()] or ["any"]
        return "_".join(parts)


def short(value: str) -> str:
    """Short form of a key value: dtypes abbreviated, other modes kept as written."""
    return DTYPE_SHORT.get(value, value)
