"""TileLang's JIT of the same kernels_py factory next to tileaot, for every bench case.

    python bench/jit_compare.py [--json results.json] [--match REGEX]

Needs a GPU, torch, triton and an importable tilelang (a build-time dependency; on the GPU
machine it is carried, see scripts/gpu_check.sh). For each case of bench/ops/*.py, the tileaot
call is run once with the native module's `launch` recorded: that gives the variant the runtime
picked (`_C.select`), its arguments (pointers, flat shapes, scalars) and so the exact kernel to
JIT-compile: the same factory with the same key and specialisation, traced for the same
target. The JIT kernel then runs on the very same buffers. Reported per case: both kernel
times (median of CUDA-event timings with L2 flushed, bench/timing.py), whether the outputs are
bit-identical, and the host cost per call of each on a tiny input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels_py

import tileaot  # noqa: E402
from run import load_cases, median_us  # noqa: E402  (bench/ is sys.path[0] for a script)
from tileaot import _lib  # noqa: E402

# DLPack-free view of a raw device pointer: torch understands __cuda_array_interface__, whose
# type strings have no bf16/fp8, so those are read as same-size integers and reinterpreted.
_CAI = {
    "float32": ("<f4", None),
    "float16": ("<f2", None),
    "bfloat16": ("<i2", torch.bfloat16),
    "float8_e4m3fn": ("|u1", torch.float8_e4m3fn),
    "float8_e4m3": ("|u1", torch.float8_e4m3fn),
    "int32": ("<i4", None),
    "int64": ("<i8", None),
    "uint8": ("|u1", None),
}


class _Cai:
    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }


def tensor_at(ptr: int, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    typestr, view = _CAI[dtype]
    t = torch.as_tensor(_Cai(ptr, shape, typestr), device="cuda")
    return t.view(view) if view is not None else t


class Recorder:
    """The native module with `launch` recorded (and still performed).

    With `capture` (a call -> copies of its buffers), each launch's buffers are also copied just
    before and just after it, while the wrapper still holds them: a wrapper's own scratch and
    outputs are freed when it returns, and the caching allocator hands that memory to whatever
    is allocated next, so views of recorded pointers are only safe while the call runs.
    """

    def __init__(self, native, capture=None):
        self._native = native
        self._capture = capture
        self.calls: list[tuple] = []
        self.before: list[list[torch.Tensor]] = []
        self.after: list[list[torch.Tensor]] = []

    def __getattr__(self, name):
        return getattr(self._native, name)

    def launch(self, handle, device, stream, ptrs, shapes, scalars):
        call = (handle, device, tuple(ptrs), tuple(shapes), tuple(scalars))
        if self._capture is not None:
            torch.cuda.synchronize()
            self.before.append(self._capture(call))
        result = self._native.launch(handle, device, stream, ptrs, shapes, scalars)
        if self._capture is not None:
            torch.cuda.synchronize()
            self.after.append(self._capture(call))
        self.calls.append(call)
        return result


def record(fn, capture=None) -> Recorder:
    """Run `fn` with the native module's launches recorded (see Recorder)."""
    native, fast = _lib.native(), _lib._fast
    rec = Recorder(native, capture)
    _lib._native, _lib._fast = rec, {}  # no short path: every launch goes through `launch`
    try:
        fn()
    finally:
        _lib._native, _lib._fast = native, fast
    torch.cuda.synchronize()
    return rec


def record_owned(fn, points: dict, arch: str) -> Recorder:
    """`record`, with copies of every launch's buffers from before and after it (owned memory)."""

    def copies(call):
        return [t.clone() for t in call_tensors(call, points[variant_of(call)], arch)]

    return record(fn, copies)


def variant_of(call: tuple) -> str:
    """The variant the runtime picked for a recorded launch."""
    handle, device, _, shapes, _ = call
    return _lib.native().select(handle, device, list(shapes))


def call_tensors(call: tuple, point, arch: str) -> list[torch.Tensor]:
    """Views of the buffers of a recorded launch of variant `point`, in prim_func order."""
    _, _, ptrs, shapes, _ = call
    it_ptr, it_dim, views = iter(ptrs), iter(shapes), []
    for p in _params(point, arch):
        if p["kind"] == "tensor":
            shape = tuple(next(it_dim) for _ in p["shape"])
            views.append(tensor_at(next(it_ptr), shape, p["dtype"]))
    return views


def _points() -> dict:
    from build_tools.matrix import enumerate_variants
    from kernels_py import all_specs

    arch = _lib.native().device_arch(0)
    return {p.name: p for p in enumerate_variants(all_specs(), (arch,), ("*",))}, arch


def _params(point, arch: str) -> list[dict]:
    """The variant's parameters (name, kind, dtype, shape) in prim_func order."""
    return _manifest_params()[(point.name, arch)]


_MANIFEST: dict | None = None


def _manifest_params() -> dict:
    global _MANIFEST
    if _MANIFEST is None:
        from tileaot._manifest import default_path  # the manifest the installed build ships

        data = json.loads(default_path().read_text())
        _MANIFEST = {(v["name"], v["arch"]): v["params"] for v in data["variants"]}
    return _MANIFEST


def _jit(point, arch: str, overrides: dict):
    import importlib
    import inspect

    import tilelang
    from tvm.target import Target

    # 'NAME' is a constant of the op's kernel file; 'package.module.NAME' one of a helper module.
    targets = {}
    for dotted in overrides:
        owner, _, name = dotted.rpartition(".")
        module = importlib.import_module(owner) if owner else inspect.getmodule(point.spec.factory)
        targets[dotted] = (module, name)
    saved = {dotted: getattr(m, name) for dotted, (m, name) in targets.items()}
    try:
        for dotted, (module, name) in targets.items():
            setattr(module, name, overrides[dotted])
        func = point.spec.factory(arch, **point.key, **point.specialisation)
    finally:
        for dotted, (module, name) in targets.items():
            setattr(module, name, saved[dotted])
    return tilelang.compile(func, target=Target({"kind": "cuda", "arch": arch}))


class JitCase:
    """One recorded tileaot launch, replayed through TileLang's JIT kernel of the same variant."""

    _compiled: dict[str, object] = {}

    def __init__(
        self,
        call: tuple,
        points: dict,
        arch: str,
        overrides: dict | None = None,
        buffers: list[torch.Tensor] | None = None,
    ):
        """`overrides`: module constants of the op's kernel file to patch while tracing (tuning).

        `buffers`: tensors to run on (copies from `record_owned`); by default views of the
        recorded pointers, valid only while the caller keeps the original tensors alive.
        """
        scalars = call[4]
        self.variant = variant_of(call)
        point = points[self.variant]
        cache_key = (self.variant, repr(sorted((overrides or {}).items())))
        if cache_key not in self._compiled:
            self._compiled[cache_key] = _jit(point, arch, overrides or {})
        self.kernel = self._compiled[cache_key]
        tensors = buffers if buffers is not None else call_tensors(call, point, arch)
        args, it_tensor, it_sc = [], iter(tensors), iter(scalars)
        for p in _params(point, arch):
            if p["kind"] == "tensor":
                args.append(next(it_tensor))
            else:  # the native module takes every scalar as a double; the JIT checks types
                value = next(it_sc)
                args.append(int(value) if p["dtype"].startswith(("int", "uint")) else value)
        self.args, self.tensors = args, list(tensors)

    def __call__(self):
        self.kernel(*self.args)


def run_all(jits: list[JitCase]) -> None:
    for j in jits:
        j()


def snapshot(jits: list[JitCase]) -> list[torch.Tensor]:
    """Copies of every buffer the recorded launches touch, in order."""
    return [t.clone() for j in jits for t in j.tensors]


def replay_matches(jits: list[JitCase], expected: list[torch.Tensor]) -> bool:
    """Run `jits` once on their buffers; True if every buffer then equals `expected` bit for bit."""
    run_all(jits)
    torch.cuda.synchronize()
    got = snapshot(jits)
    return all(
        torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        for a, b in zip(expected, got, strict=True)
    )


def owned_cases(rec: Recorder, points: dict, arch: str, overrides=None) -> list[JitCase]:
    """JIT cases of recorded launches, each on its own copy of the buffers as they were before."""
    return [
        JitCase(c, points, arch, overrides, [t.clone() for t in before])
        for c, before in zip(rec.calls, rec.before, strict=True)
    ]


def expected_after(rec: Recorder) -> list[torch.Tensor]:
    """tileaot's buffers right after each recorded launch, in `snapshot` order."""
    return [t for after in rec.after for t in after]


def compare_case(label: str, size: str, make, points, arch) -> dict:
    ours, _, _, _ = make()
    rec = record_owned(ours, points, arch)
    jits = owned_cases(rec, points, arch)
    same = replay_matches(jits, expected_after(rec))
    t_ours, t_jit = median_us(ours), median_us(lambda: run_all(jits))
    return {
        "op": label,
        "size": size,
        "variants": [j.variant for j in jits],
        "tileaot_us": t_ours,
        "tilelang_jit_us": t_jit,
        "ratio": t_ours / t_jit,
        "bit_identical": same,
    }


def host_cost(points, arch) -> dict:
    from host_profile import per_call_us

    x = torch.randn(4, 4096, device="cuda").bfloat16()
    w = torch.randn(4096, device="cuda").bfloat16()
    y = torch.empty_like(x)

    def ours():
        tileaot.rms_norm(x, w, 1e-6, out=y)

    (jit,) = [JitCase(c, points, arch) for c in record(ours).calls]
    kernel, args = jit.kernel, jit.args
    return {
        "call": "rms_norm x[4, 4096] bf16, out= (3 tensors)",
        "tileaot_us": per_call_us(ours),
        "tilelang_jit_us": per_call_us(lambda: kernel(*args)),
        "torch_eager_us": per_call_us(lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6)),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--match", default=".", help="only cases whose label matches")
    args = parser.parse_args()
    points, arch = _points()
    rows = []
    for label, size, make in load_cases():
        if not re.search(args.match, label):
            continue
        try:
            row = compare_case(label, size, make, points, arch)
        except Exception as exc:  # one failing case must not hide the others
            row = {"op": label, "size": size, "error": f"{type(exc).__name__}: {exc}"[:300]}
        rows.append(row)
        if args.json:  # after every case: a timeout later must not lose the rows so far
            Path(args.json).write_text(json.dumps({"kernels": rows}, indent=1))
        if "error" in row:
            print(f"{label:48s} {size:16s} ERROR {row['error']}", flush=True)
        else:
            print(
                f"{label:48s} {size:16s} tileaot {row['tileaot_us']:9.1f} us  "
                f"jit {row['tilelang_jit_us']:9.1f} us  ratio {row['ratio']:.3f}  "
                f"identical={row['bit_identical']}",
                flush=True,
            )
    host = host_cost(points, arch)
    print(json.dumps(host))
    if args.json:
        Path(args.json).write_text(json.dumps({"kernels": rows, "host": host}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
