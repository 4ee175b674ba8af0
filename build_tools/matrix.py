"""The build matrix: which variants exist for a build config.

A variant is one (spec, key, specialisation); it is built for every configured arch its spec
supports. Its procedural name is registry key, symbol prefix and filter glob at once.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kernels_py.spec import BUILDABLE_ARCHS, KernelSpec

ARCH_ORDER = {a: i for i, a in enumerate(BUILDABLE_ARCHS)}


@dataclass(frozen=True)
class VariantPoint:
    spec: KernelSpec
    key: Mapping[str, str]
    specialisation: Mapping[str, int]
    archs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.spec.variant_name(self.key, self.specialisation)

    @property
    def key_string(self) -> str:
        return self.spec.key_string(self.key)

    @property
    def generic(self) -> bool:
        return not self.specialisation


def parse_archs(text: str | Iterable[str], where: str = "--archs") -> tuple[str, ...]:
    """'70;90a,sm_100f' or '9.0,B300' → ('sm_70', 'sm_90a', 'sm_100f'), validated and in
    canonical order (python/tileaot/_arch.py: the spellings `tileaot check --arch` takes)."""
    from build_tools.archs import arch

    items = text if isinstance(text, str) else list(text)
    return tuple(arch.parse_build_archs(items, where))


def parse_ops(text: str) -> tuple[str, ...]:
    """'rms_norm*;gemm_bf16*' → globs over variant names ('*' = everything)."""
    globs = tuple(g.strip() for g in text.replace(";", ",").split(",") if g.strip())
    return globs or ("*",)


def enumerate_variants(
    specs: Iterable[KernelSpec],
    archs: tuple[str, ...],
    ops: tuple[str, ...] = ("*",),
    config: Any = None,
) -> list[VariantPoint]:
    """Every variant selected by `ops` globs, with the archs its spec supports.

    `config` (a bring-your-shapes file: a build_tools.userconfig.UserConfig) first narrows the
    specs to its ops, keys and specialisations. It is passed in, never read here: the process
    boundary (the CLI, `generate` under CMake) turns $TILEAOT_CONFIG into it.
    """
    if config is not None:
        specs = config.apply(specs)
    points = []
    for spec in specs:
        if {} not in [dict(s) for s in spec.specs]:
            raise ValueError(f"{spec.op}: specs must include the generic variant {{}}")
        for key in spec.keys:
            for specialisation in spec.specs:
                name = spec.variant_name(key, specialisation)
                if not any(fnmatch.fnmatchcase(name, g) or g == spec.op for g in ops):
                    continue
                supported = tuple(a for a in archs if spec.supports(a, key, specialisation))
                if supported:
                    points.append(VariantPoint(spec, key, specialisation, supported))
    names = [p.name for p in points]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"variant names are not unique: {duplicates}")
    return points
