"""GPU architectures for `python -m tileaot check`: device names, SASS targets, what runs where.

The rules are the runtime's (cpp/runtime/select.cpp): a target runs on devices of its major
version only; an "a" target (sm_90a) on exactly its major.minor, a plain one (sm_80) on every
minor at or above its own; among targets that run, the highest minor wins, "a" before plain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a tileaot build can target (kernels_py.spec.BUILDABLE_ARCHS; tests/test_check.py keeps the
# two equal). The installed package has no kernels_py, so it carries its own copy.
BUILDABLE = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a")

# Compute capability of common GPUs, from NVIDIA's table (https://developer.nvidia.com/cuda-gpus).
GPUS = {
    "V100": (7, 0),
    "T4": (7, 5),
    "A100": (8, 0),
    "A30": (8, 0),
    "A10": (8, 6),
    "A40": (8, 6),
    "RTX3090": (8, 6),
    "L4": (8, 9),
    "L40": (8, 9),
    "L40S": (8, 9),
    "RTX4090": (8, 9),
    "H20": (9, 0),
    "H100": (9, 0),
    "H200": (9, 0),
    "GH200": (9, 0),
    "B200": (10, 0),
    "GB200": (10, 0),
    "B300": (10, 3),
    "RTX5090": (12, 0),
}

_SM = re.compile(r"(?:sm_?)?(\d+)(\d)a?", re.IGNORECASE)  # sm_90a, sm90, 90a, 100a, 86
_DOTTED = re.compile(r"(\d+)\.(\d)")  # 9.0, 12.0


@dataclass(frozen=True)
class Target:
    """A SASS target of the build ("sm_90a")."""

    name: str
    major: int
    minor: int
    specific: bool  # an "a" target: its SASS runs on exactly this major.minor

    def runs_on(self, major: int, minor: int) -> bool:
        if self.major != major:
            return False
        return self.minor == minor if self.specific else self.minor <= minor

    @property
    def rank(self) -> int:
        """Preference among the targets that run on one device (select.cpp's arch_rank)."""
        return self.minor * 2 + int(self.specific)


def target(name: str) -> Target:
    """Target("sm_90a", 9, 0, True) for "sm_90a"; ValueError for anything else."""
    m = re.fullmatch(r"sm_(\d+)(\d)(a?)", name)
    if m is None:
        raise ValueError(f"not a SASS target name: {name!r} (expected e.g. 'sm_90a')")
    return Target(name, int(m[1]), int(m[2]), m[3] == "a")


def parse_device(text: str) -> tuple[int, int]:
    """Compute capability (major, minor) of a device given as "sm_90a", "90a", "9.0" or "H200"."""
    cleaned = re.sub(r"[\s_-]", "", text).upper()
    if cleaned in GPUS:
        return GPUS[cleaned]
    for pattern in (_DOTTED, _SM):
        m = pattern.fullmatch(text.strip())
        if m:
            return int(m[1]), int(m[2])
    raise ValueError(
        f"unknown GPU arch {text!r}: give a SASS target (sm_90a, 90a), a compute capability "
        f"(9.0) or a GPU name ({', '.join(GPUS)})"
    )


def device_name(major: int, minor: int) -> str:
    """How the runtime names a device's arch (select.cpp's arch_name): sm_90a, sm_100a, sm_86."""
    suffix = "a" if (major, minor) in ((9, 0), (10, 0)) else ""
    return f"sm_{major}{minor}{suffix}"


def best_buildable(major: int, minor: int) -> str | None:
    """The target a build should add to serve this device (highest rank that runs), or None."""
    usable = [target(a) for a in BUILDABLE if target(a).runs_on(major, minor)]
    return max(usable, key=lambda t: t.rank).name if usable else None
