"""GPU architectures: the one place that reads an arch as a user writes it, and what runs where.

Used by `python -m tileaot check --arch`, and (loaded by path, build_tools/archs.py) by the
build's --archs, TILEAOT_ARCHS and the TOML's `archs`, so every place takes the same spellings:
a target ("sm_90a", "90a", "100f"), a compute capability ("9.0", "90", "sm_90") or a GPU name
as NVIDIA or `nvidia-smi` writes it ("H200", "NVIDIA H800", "A10G", "RTX PRO 6000").

The rules are the runtime's (cpp/runtime/select.cpp), as NVIDIA defines the targets (CUDA
Programming Guide, "Feature availability"; CUDA 12.9 added family targets):
- a plain target (sm_80) runs on devices of its major with a minor at or above its own;
- a family target (sm_100f) likewise, within its major (sm_100f: 10.0 and 10.3; sm_120f:
  12.0 and 12.1), and may use the family's common features;
- an "a" target (sm_90a) runs on exactly its major.minor;
- PTX (compute_80) is JIT-compiled by the driver for any device of that compute capability or
  newer; the runtime uses it only when no SASS fits (TILEAOT_PTX changes that, see `Target.rank`).
Among targets that run, the highest minor wins, then "a" before "f" before plain; PTX last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a tileaot build can target (kernels_py.spec.BUILDABLE_ARCHS; tests/test_check.py keeps the
# two equal) and builds by default (kernels_py.spec.DEFAULT_ARCHS). The installed package has no
# kernels_py, so it carries its own copy.
BUILDABLE = (
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
DEFAULT = ("sm_70", "sm_75", "sm_80", "sm_90a", "sm_100f", "sm_120f")

# Compute capability of GPUs, from NVIDIA's table (https://developer.nvidia.com/cuda-gpus), keyed
# by the name with spaces, dashes and the NVIDIA/Tesla/GeForce/Quadro prefixes removed. A device
# name as nvidia-smi prints it ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB") is looked up by
# its longest key prefix. Jetson Thor is 11.0 from CUDA 13 (it was 10.1 under CUDA 12.9).
GPUS = {
    "V100": (7, 0),
    "TITANV": (7, 0),
    "T4": (7, 5),
    "RTX2080": (7, 5),
    "RTX6000": (7, 5),
    "A100": (8, 0),
    "A800": (8, 0),
    "A30": (8, 0),
    "A10": (8, 6),
    "A10G": (8, 6),
    "A40": (8, 6),
    "RTXA6000": (8, 6),
    "RTXA5000": (8, 6),
    "RTX3090": (8, 6),
    "RTX3080": (8, 6),
    "JETSONORIN": (8, 7),
    "ORIN": (8, 7),
    "L4": (8, 9),
    "L20": (8, 9),
    "L40": (8, 9),
    "L40S": (8, 9),
    "RTX4090": (8, 9),
    "RTX4080": (8, 9),
    "RTX6000ADA": (8, 9),
    "H20": (9, 0),
    "H100": (9, 0),
    "H800": (9, 0),
    "H200": (9, 0),
    "GH200": (9, 0),
    "B100": (10, 0),
    "B200": (10, 0),
    "GB200": (10, 0),
    "B300": (10, 3),
    "GB300": (10, 3),
    "JETSONTHOR": (11, 0),
    "THOR": (11, 0),
    "RTX5090": (12, 0),
    "RTX5080": (12, 0),
    "RTXPRO6000": (12, 0),
    "RTXPRO5000": (12, 0),
    "DGXSPARK": (12, 1),
    "GB10": (12, 1),
}
_PREFIXES = ("NVIDIA", "TESLA", "GEFORCE", "QUADRO")

_TARGET = re.compile(r"(?:sm_?|compute_?)?(\d{1,2})(\d)([af]?)", re.IGNORECASE)  # 90a, sm_100f
_DOTTED = re.compile(r"(\d{1,2})\.(\d)")  # 9.0, 12.1
PTX_PREFIX = "compute_"

# How dispatch treats PTX rows (TILEAOT_PTX, read by the runtime at first use): "auto" only when
# no SASS fits, "off" never, "prefer" before any SASS, "prefer:80" the compute_80 PTX first.
PTX_MODES = ("auto", "off", "prefer", "prefer:<arch>")


def ptx_mode(text: str | None) -> str:
    """A TILEAOT_PTX value as the runtime reads it (select.cpp's parse_ptx_policy): "auto",
    "off", "prefer" or "prefer:80"; ValueError naming the accepted values otherwise."""
    value = (text or "").strip()
    if value in ("", "auto"):
        return "auto"
    if value in ("off", "0"):
        return "off"
    if value == "prefer":
        return value
    m = re.fullmatch(r"prefer:(?:compute_|sm_)?(\d{2,3})", value)
    if m:
        return f"prefer:{m[1]}"
    raise ValueError(
        f"TILEAOT_PTX={text!r} is not one of auto (PTX only where no SASS fits; the default), "
        "off (never: a miss instead), prefer (PTX before SASS), prefer:80 (compute_80 first)"
    )


@dataclass(frozen=True)
class Target:
    """A target of the build: SASS ("sm_90a", "sm_100f", "sm_80") or PTX ("compute_80")."""

    name: str
    major: int
    minor: int
    kind: str  # "": plain SASS, "f": family SASS, "a": arch-specific SASS, "ptx": PTX

    @property
    def specific(self) -> bool:
        return self.kind == "a"

    @property
    def ptx(self) -> bool:
        return self.kind == "ptx"

    def runs_on(self, major: int, minor: int, ptx_mode: str = "auto") -> bool:
        """Whether the runtime would run this target on a device of major.minor."""
        if self.ptx:
            return ptx_mode != "off" and (major, minor) >= (self.major, self.minor)
        if self.major != major:
            return False
        return self.minor == minor if self.specific else self.minor <= minor

    def rank(self, ptx_mode: str = "auto") -> int:
        """Preference among the targets that run on one device (select.cpp's arch_rank)."""
        if self.ptx:
            version = self.major * 10 + self.minor
            preferred = ptx_mode in ("prefer", f"prefer:{version}")
            return (2000 if preferred else 0) + version
        return 1000 + self.minor * 3 + {"": 0, "f": 1, "a": 2}[self.kind]


def target(name: str) -> Target:
    """Target("sm_90a", 9, 0, "a") for "sm_90a"; "compute_80" is PTX; ValueError otherwise."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", name)
    if m is None or (m[1] == "compute" and m[4]):
        raise ValueError(f"not a target name: {name!r} (expected e.g. 'sm_90a' or 'compute_80')")
    kind = "ptx" if m[1] == "compute" else m[4]
    return Target(name, int(m[2]), int(m[3]), kind)


def gpu_name(text: str) -> tuple[int, int] | None:
    """Compute capability of a GPU named as NVIDIA or nvidia-smi writes it, or None."""
    cleaned = re.sub(r"[\s_-]", "", text).upper()
    for prefix in _PREFIXES:
        cleaned = cleaned.removeprefix(prefix)
    if cleaned in GPUS:
        return GPUS[cleaned]
    # "H10080GBHBM3", "A100SXM480GB": the longest table name the device name starts with.
    for key in sorted(GPUS, key=len, reverse=True):
        if cleaned.startswith(key):
            return GPUS[key]
    return None


def _forms_hint() -> str:
    return (
        "give a target (sm_90a, 90a, 100f), a compute capability (9.0, 90) or a GPU name "
        "(H100, B300, RTX PRO 6000, ...)"
    )


def parse_device(text: str) -> tuple[int, int]:
    """Compute capability (major, minor) of a device given as "sm_90a", "90a", "9.0" or "H200"."""
    stripped = text.strip()
    for pattern in (_DOTTED, _TARGET):
        m = pattern.fullmatch(stripped)
        if m:
            return int(m[1]), int(m[2])
    cc = gpu_name(stripped)
    if cc is not None:
        return cc
    raise ValueError(f"unknown GPU arch {text!r}: {_forms_hint()}")


def device_name(major: int, minor: int) -> str:
    """How the runtime names a device's arch (select.cpp's arch_name): sm_90a, sm_100a, sm_86."""
    suffix = "a" if (major, minor) in ((9, 0), (10, 0)) else ""
    return f"sm_{major}{minor}{suffix}"


def serving(major: int, minor: int, among: tuple[str, ...] = BUILDABLE) -> list[Target]:
    """The SASS targets of `among` that run on major.minor, best first."""
    usable = [target(a) for a in among if target(a).runs_on(major, minor)]
    return sorted(usable, key=lambda t: t.rank(), reverse=True)


def best_buildable(major: int, minor: int) -> str | None:
    """The target a build should add to serve this device, or None: a default target that runs
    there (sm_100f for a B300), else the best buildable one (sm_86 for 8.6 is not default but
    sm_80 is: sm_80)."""
    best = serving(major, minor, DEFAULT) or serving(major, minor)
    return best[0].name if best else None


def build_target(text: str, where: str = "archs") -> str:
    """The build target one item of an arch list names: "90a"/"sm_90a" → sm_90a; a compute
    capability or GPU name ("9.0", "90", "H100", "B300") → the default target serving it
    (sm_90a, sm_100f). ValueError, naming the input, `where` and the accepted forms, otherwise."""
    stripped = text.strip()
    m = _TARGET.fullmatch(stripped)
    if m:
        name = f"sm_{m[1]}{m[2]}{m[3].lower()}"
        if name in BUILDABLE:
            return name
        if m[3]:  # an explicit suffix that tileaot does not build
            raise ValueError(
                f"unknown arch {text!r} in {where}: tileaot builds {', '.join(BUILDABLE)}"
            )
    try:
        major, minor = parse_device(stripped)
    except ValueError:
        raise ValueError(
            f"unknown arch {text!r} in {where}: {_forms_hint()}; tileaot builds "
            f"{', '.join(BUILDABLE)}"
        ) from None
    best = best_buildable(major, minor)
    if best is None:
        raise ValueError(
            f"no tileaot target runs on {text!r} (compute capability {major}.{minor}) in "
            f"{where}: it gets the PTX forward path (compute_80) of a default build; targets: "
            f"{', '.join(BUILDABLE)}"
        )
    return best


def parse_build_archs(text: str | list[str] | tuple[str, ...], where: str = "archs") -> list[str]:
    """'70;90a,sm_100f' (or a list) → ['sm_70', 'sm_90a', 'sm_100f'] in BUILDABLE order."""
    items = re.split(r"[;,]", text) if isinstance(text, str) else list(text)
    archs = {build_target(i, where) for i in items if i.strip()}
    if not archs:
        raise ValueError(f"no archs selected in {where}: e.g. '80;90a;100f'")
    return sorted(archs, key=BUILDABLE.index)
