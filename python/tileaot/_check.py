"""`python -m tileaot check MODEL`: which of a model's calls this build serves on a given GPU.

Each call of the model's forward pass (tileaot._model_calls) goes through the runtime's own
choice of variant, replayed on the build's manifest (tileaot._manifest), and gets a verdict:

    specialised  a variant built for exactly these sizes (the fast path)
    generic      the runtime-size variant: correct, possibly slower
    miss         nothing would run (VariantMissError): why, and the build option that adds it
    not served   tileaot has no kernel for what the model computes there (a routing, norm,
                 activation or weight format no op implements): no build adds it

The report ends with the build options that add what is missing and a bring-your-shapes TOML
(build_tools/userconfig.py) that builds this model's ops for its GPU, every size specialised
that the kernel can specialise (tileaot._buildable: checked before anything is traced).
Needs neither a GPU nor the native module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _arch, _buildable, _manifest
from ._manifest import Manifest, Row
from ._model_calls import Call, ModelConfig, calls

SPECIALISED, GENERIC, MISS, UNSERVED = "specialised", "generic", "miss", "not served"
STATUSES = (SPECIALISED, GENERIC, MISS, UNSERVED)


@dataclass(frozen=True)
class Verdict:
    call: Call
    status: str  # SPECIALISED, GENERIC, MISS or UNSERVED
    variant: str | None = None  # what the runtime would launch
    target: str = ""  # its code: "sm_90a", or "compute_80" (PTX the driver JIT-compiles)
    reason: str = ""  # why a miss
    fix: dict[str, str] = field(default_factory=dict)  # build option -> value it needs added
    spec: dict[str, int] = field(default_factory=dict)  # the specialisation fitting this call
    unbuildable: str = ""  # why the kernel cannot specialise this call's sizes (spec left empty)


@dataclass(frozen=True)
class Report:
    model: str
    device: str  # "sm_90a"
    manifest: Manifest
    verdicts: list[Verdict]
    ptx_mode: str = "auto"  # TILEAOT_PTX as replayed

    @property
    def covered(self) -> bool:
        return all(v.status in (SPECIALISED, GENERIC) for v in self.verdicts)

    def count(self, status: str) -> int:
        return sum(v.status == status for v in self.verdicts)


def check(cfg: ModelConfig, manifest: Manifest, device: str, ptx_mode: str | None = None) -> Report:
    """Verdicts for every call of `cfg` on a GPU `device` ("sm_90a", "9.0", "H200", "NVIDIA
    H800"), PTX rows treated as TILEAOT_PTX says (`ptx_mode`; default: the environment's)."""
    major, minor = _arch.parse_device(device)
    mode = _arch.ptx_mode(os.environ.get("TILEAOT_PTX") if ptx_mode is None else ptx_mode)
    verdicts = [_verdict(manifest, c, major, minor, mode) for c in calls(cfg)]
    return Report(cfg.name, _arch.device_name(major, minor), manifest, verdicts, mode)


def _verdict(manifest: Manifest, call: Call, major: int, minor: int, mode: str) -> Verdict:
    if call.unserved:
        return Verdict(
            call, UNSERVED, reason=f"not served (tileaot has no kernel for {call.unserved})"
        )
    group = manifest.group(call.op, call.key)
    if group and len(call.shapes) != len(group[0].dims):
        raise ValueError(  # a wrapper changed its layout and _model_calls did not follow
            f"internal: {call.op} takes {len(group[0].dims)} shape values in this build, "
            f"tileaot check made {len(call.shapes)}: update tileaot/_model_calls.py"
        )
    spec = _spec_for(group, call.shapes)
    unbuildable = _buildable.why_not(call.op, call.key, spec) or "" if spec else ""
    if unbuildable:
        spec = {}
    row = _manifest.select(group, major, minor, call.shapes, mode)
    if row is not None:
        status = GENERIC if row.generic else SPECIALISED
        return Verdict(call, status, row.name, row.target.name, spec=spec, unbuildable=unbuildable)
    if not group and "*" in manifest.ops:  # every kernel tileaot has was built: none serves it
        built = manifest.keys(call.op)
        have = f"keys built: {', '.join(built)}" if built else "no such op in this build"
        why = f"not served (tileaot has no {call.op}[{call.key}] kernel; {have})"
        return Verdict(call, UNSERVED, reason=why)
    reason, fix, shape_miss = _why_missing(manifest, call, group, major, minor, mode)
    # A shape the generic variant rejects (N % 8 for gemm) would not suit a specialisation
    # either: leave it out of the suggested build.
    spec = {} if shape_miss else spec
    return Verdict(call, MISS, reason=reason, fix=fix, spec=spec, unbuildable=unbuildable)


# ---- why a call misses, and what adds it ------------------------------------------------------


def _why_missing(
    m: Manifest, call: Call, group: list[Row], major: int, minor: int, mode: str = "auto"
) -> tuple[str, dict[str, str], bool]:
    """(why, the build options that add it, whether the shapes themselves are the problem)."""
    label = f"{call.op}[{call.key}]"
    if not group:
        return (*_missing_key(m, call, label), False)
    on_device = [r for r in group if r.target.runs_on(major, minor, mode)]
    if not on_device and mode == "off" and any(r.target.runs_on(major, minor) for r in group):
        device = _arch.device_name(major, minor)
        why = f"no SASS of {label} runs on {device}, and TILEAOT_PTX=off keeps its PTX from running"
        return why, {}, False
    if not on_device:
        return (*_missing_arch(m, group, label, major, minor), False)
    generic = next((r for r in on_device if r.generic), None)
    if generic is None:
        specs = ", ".join(dict.fromkeys(r.spec for r in on_device))
        why = f"only specialised {label} variants are built ({specs}); none fits"
        return why, _ops_fix(m, f"{_name_prefix(call)}_any"), False
    return f"the generic {label} variant {_why_not(generic, call.shapes)}", {}, True


def _missing_key(m: Manifest, call: Call, label: str) -> tuple[str, dict[str, str]]:
    """A key not in a reduced build (a full build's missing keys are UNSERVED, in _verdict)."""
    built = m.keys(call.op)
    have = f" (keys built: {', '.join(built)})" if built else ""
    why = f"{label} is not in this build (ops filter {','.join(m.ops)}){have}"
    return why, _ops_fix(m, f"{_name_prefix(call)}_*")


def _missing_arch(
    m: Manifest, group: list[Row], label: str, major: int, minor: int
) -> tuple[str, dict[str, str]]:
    device = _arch.device_name(major, minor)
    built = ", ".join(dict.fromkeys(r.target.name for r in group))
    need = _arch.best_buildable(major, minor)
    if need is None:
        return (
            f"no tileaot SASS target runs on {device} (targets: {', '.join(_arch.BUILDABLE)}) "
            f"and this build has no PTX of {label} that would (built for {built}; PTX comes "
            "from the sm_80 sources: keep 80 in TILEAOT_ARCHS and TILEAOT_PTX_ARCHS)",
            {},
        )
    if need in m.archs:  # built for that arch, but this kernel's spec excludes it
        return f"{label} is not built for {need} (its kernel does not support it)", {}
    archs = ";".join(a.removeprefix("sm_") for a in (*m.archs, need))
    return f"no {label} variant runs on {device} (built for {built})", {"TILEAOT_ARCHS": archs}


def _ops_fix(m: Manifest, glob: str) -> dict[str, str]:
    return {"TILEAOT_OPS": ",".join((*m.ops, glob))} if "*" not in m.ops else {}


def _name_prefix(call: Call) -> str:
    """Variant names are op, key values and spec joined by '_' (kernels_py/spec.py)."""
    return "_".join((call.op, *call.key.split(",")))


def _why_not(row: Row, shapes: Sequence[int]) -> str:
    """What keeps `shapes` from a generic row: a constraint, int32 sizes or the shape pattern."""
    sizes = {t: v for t, v in zip(row.dims, shapes, strict=True) if t.isidentifier()}
    for var, divisor in sorted(row.constraints.items()):
        if sizes.get(var, 0) % divisor:
            return (
                f"needs {var} % {divisor} == 0 and here {var} = {sizes[var]}: pad that "
                f"dimension to a multiple of {divisor}"
            )
    too_big = [f"{t} = {v}" for t, v in sizes.items() if v > _manifest.INT32_MAX]
    if too_big:
        return f"takes sizes below 2**31; here {', '.join(too_big)}: split the call"
    return f"does not accept these shapes ({' '.join(row.dims)} vs {list(shapes)})"


def _is_ptx(target: str) -> bool:
    return target.startswith(_arch.PTX_PREFIX)


# ---- the specialisation that fits a call ------------------------------------------------------


def _spec_for(group: list[Row], shapes: Sequence[int]) -> dict[str, int]:
    """{'N': 7168} for rms_norm at N = 7168: the op's specialised axes, sized for this call.

    The axes come from the names of the specialised variants built (n7168, n14336_k4096) and
    their values from the generic pattern matched against the call. Empty if the op has no
    specialisations in this build or no generic variant to read the sizes from.
    """
    axes = list(dict.fromkeys(a for r in group if not r.generic for a in _axes(r.spec)))
    generic = next((r for r in group if r.generic), None)
    if not axes or generic is None:
        return {}
    sizes = {t: v for t, v in zip(generic.dims, shapes, strict=True) if t.isidentifier()}
    by_lower = {name.lower(): name for name in sizes}
    named = [by_lower.get(a) for a in axes]
    return {n: sizes[n] for n in named if n is not None}


def _axes(spec: str) -> list[str]:
    """'n14336_k4096' -> ['n', 'k']."""
    return [m[1] for m in (re.fullmatch(r"([a-z]+)\d+", p) for p in spec.split("_")) if m]


# ---- output -------------------------------------------------------------------------------------


def build_options(report: Report) -> dict[str, str]:
    """CMake options that add every miss a build option can add (merged over the calls)."""
    merged: dict[str, list[str]] = {}
    for v in report.verdicts:
        for option, value in v.fix.items():
            sep = ";" if option == "TILEAOT_ARCHS" else ","
            items = merged.setdefault(option, [])
            items += [i for i in value.split(sep) if i not in items]
    return {k: (";" if k == "TILEAOT_ARCHS" else ",").join(v) for k, v in merged.items()}


def user_config(report: Report) -> str:
    """A bring-your-shapes TOML building this model's ops for its GPU, every size specialised."""
    major, minor = _arch.parse_device(report.device)
    target = _arch.best_buildable(major, minor)
    served = [v for v in report.verdicts if v.status != UNSERVED]
    ops = list(dict.fromkeys(v.call.op for v in served))
    lines = [f"# tileaot build for {report.model} on {report.device} (python -m tileaot check)"]
    skipped = dict.fromkeys(v.unbuildable for v in served if v.unbuildable)
    lines += [f"# not specialised (the generic variant serves it): {why}" for why in skipped]
    lines += ["[build]"]
    if target is not None:
        lines.append(f'archs = ["{target.removeprefix("sm_")}"]')
    lines.append("ops = [" + ", ".join(f'"{op}"' for op in ops) + "]")
    for op in ops:
        specs = [v.spec for v in served if v.call.op == op and v.spec]
        specs = [dict(s) for s in dict.fromkeys(tuple(s.items()) for s in specs)]
        if specs:
            lines += ["", f"[ops.{op}]", *_toml_specs(specs)]
    return "\n".join(lines) + "\n"


def _toml_specs(specs: list[dict[str, int]]) -> list[str]:
    """specs = [{N = 7168}] on one line, or one table a line when there are several."""
    tables = ["{" + ", ".join(f"{k} = {n}" for k, n in s.items()) + "}" for s in specs]
    if len(tables) == 1:
        return [f"specs = [{tables[0]}]"]
    return ["specs = [", *(f"  {t}," for t in tables), "]"]


def to_json(report: Report) -> dict[str, Any]:
    """The report as plain data (`python -m tileaot check --json`)."""
    return {
        "model": report.model,
        "device": report.device,
        "manifest": report.manifest.path,
        "build": {"archs": list(report.manifest.archs), "ops": list(report.manifest.ops)},
        "covered": report.covered,
        "ptx_mode": report.ptx_mode,
        "calls": [_verdict_json(v) for v in report.verdicts],
        "build_options": build_options(report),
        "user_config": user_config(report),
    }


def _verdict_json(v: Verdict) -> dict[str, Any]:
    out = asdict(v)
    call = out.pop("call")
    call["call"] = call.pop("text")
    return {**call, **out}


def format_report(report: Report) -> str:
    """The report as `python -m tileaot check` prints it."""
    m = report.manifest
    lines = [
        f"tileaot check: {report.model} on {report.device}",
        f"build: {m.path} (archs {' '.join(m.archs)}; ops {','.join(m.ops)})",
        "",
    ]
    for v in report.verdicts:
        lines += _format_verdict(v)
    n = len(report.verdicts)
    summary = ", ".join(f"{report.count(s)} {s}" for s in (SPECIALISED, GENERIC, MISS))
    if report.count(UNSERVED):
        summary += f", {report.count(UNSERVED)} {UNSERVED}"
    verdict = "fully covered" if report.covered else "NOT fully covered"
    lines += ["", f"{n} calls: {summary} -> {verdict} on {report.device}"]
    jit = sum(_is_ptx(v.target) for v in report.verdicts)
    if jit:
        lines.append(
            f"{jit} of them run PTX: no SASS of this build fits {report.device} (or TILEAOT_PTX="
            f"{report.ptx_mode}), so the driver JIT-compiles it on first use"
        )
    options = build_options(report)
    if options:
        defines = " ".join(f"-Ccmake.define.{k}='{v}'" for k, v in options.items())
        lines += [
            "",
            "Build options that add the misses they can:",
            f"  bash scripts/build_wheel.sh {defines}",
        ]
    lines += [
        "",
        "A wheel for this model, every call served with the sizes its kernels can specialise:",
        "this TOML (--save-config FILE writes it) built with `python -m build_tools wheel",
        "--config FILE` (bring your shapes):",
    ]
    lines += ["  " + line if line else "" for line in user_config(report).splitlines()]
    return "\n".join(lines)


def _format_verdict(v: Verdict) -> list[str]:
    c = v.call
    status = v.status.upper() if v.status in (MISS, UNSERVED) else v.status
    head = f"  {status:<12} {c.op}[{c.key}] {c.text}"
    uses = f"      used by: {', '.join(u for u in c.uses if u)}"
    if v.status == UNSERVED:
        return [head, uses, f"      {v.reason}"]
    if v.status != MISS:
        hint = ""
        if v.status == GENERIC and v.spec:
            hint = "  (specialise: " + ", ".join(f"{k} = {n}" for k, n in v.spec.items()) + ")"
        code = f" [{v.target} PTX: the driver JIT-compiles it]" if _is_ptx(v.target) else ""
        extra = [f"      not specialisable: {v.unbuildable}"] if v.unbuildable else []
        return [f"{head} -> {v.variant}{code}{hint}", uses, *extra]
    fix = " ".join(f"{k}={val}" for k, val in v.fix.items())
    return [head, uses, f"      miss: {v.reason}" + (f" -> build with {fix}" if fix else "")]
