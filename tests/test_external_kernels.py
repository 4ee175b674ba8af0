"""Kernels kept outside the repository, end to end on the CPU: examples/external_kernels.

One command (`python -m build_tools wheel --kernels ... --config ... --name my_ops`) traces the
example's scaled_add (bf16, sm_80: one trace, one cubin and one PTX), compiles it and builds the
wheel; the wheel is installed into a fresh virtualenv (--system-site-packages for torch; the
wheel itself goes into the venv) and called there against the fake CUDA driver of cpp/tests_native
(tests/_fake_driver.py), from a folder where neither the repository's sources nor the staged
package can be imported. Checked: the launches (the checked path: `_C.call`, the short path,
refuses CPU tensors; tests/test_schema_op.py checks what it is handed), out=, a
VariantMissError for a dtype and for a GPU the build lacks, one-line errors naming the argument,
the torch custom ops (also under torch.compile), the C++ header, and that tileaot's own native
module loads beside it.
Cost: one trace (~20 s, then cached), two device compiles and the runtime's C++ (~2 min on 2
cores). The build errors that need no tracing are checked first, cheaply.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from _fake_driver import PRELUDE, build_fake_driver

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "external_kernels"
NEEDS = ("tilelang", "torch", "nanobind", "scikit_build_core", "nvidia.cuda_nvrtc")


def _missing() -> list[str]:
    return [m for m in NEEDS if importlib.util.find_spec(m.split(".")[0]) is None]


def _wheel(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "build_tools", "wheel", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize(
    "args, error",
    [
        (["--kernels", "no_such_kernels"], "--kernels no_such_kernels: cannot import it"),
        (["--kernels", "examples/nowhere"], "--kernels examples/nowhere: no such file or folder"),
        (["--kernels", "kernels_py"], "--kernels kernels_py: op 'rms_norm' has no schema"),
        (["--kernels", str(EXAMPLE / "my_kernels"), "--name", "tileaot"], "--name tileaot:"),
        (["--kernels", str(EXAMPLE / "my_kernels"), "--name", "my_kernels"], "--name my_kernels:"),
        (["--kernels", str(EXAMPLE / "my_kernels"), "--name", "my-ops"], "--name 'my-ops':"),
        (["--name", "my_ops"], "--name names the package of --kernels"),
    ],
)
def test_mistakes_are_one_line_before_any_build(args, error) -> None:
    done = _wheel(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {error}"), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_config_naming_another_op(tmp_path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[build]\narchs = ["80"]\n\n[ops.rms_norm]\ndtype = ["bf16"]\n')
    done = _wheel("--kernels", str(EXAMPLE / "my_kernels"), "--config", str(config))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {config}: unknown op 'rms_norm'"), done.stderr
    assert "ops: scaled_add" in done.stderr


def test_the_package_name() -> None:
    from build_tools.extwheel import ExtError, package_name

    assert package_name(None, "my_pkg.kernels") == "my_pkg_kernels"
    assert package_name(None, "my_kernels") == "my_kernels_ops"  # not the kernels' own name
    assert package_name("fast_ops", "my_pkg.kernels") == "fast_ops"
    with pytest.raises(ExtError, match="^--name my_pkg: that is your kernels' package"):
        package_name("my_pkg", "my_pkg.kernels")


def test_the_runtime_copied_is_op_agnostic() -> None:
    from build_tools.extwheel import runtime_modules

    files = runtime_modules()
    assert {"_schema.py", "_schema_op.py", "_schema_torch.py", "_lib.py"} <= set(files)
    assert all(f.startswith("_") for f in files)  # no op module, no torch_ops


def test_the_schema_is_rebuilt_in_the_wheel(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from tileaot._schema import OpSchema
    from tileaot.swiglu import SCHEMA

    from build_tools.extwheel import _schema_call

    for schema in (SCHEMA, importlib.import_module("my_kernels.scaled_add").SCHEMA):
        rebuilt = eval(_schema_call(schema), {"OpSchema": OpSchema})
        assert (rebuilt.tensors, rebuilt.scalars, rebuilt.key) == (
            schema.tensors,
            schema.scalars,
            schema.key,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv's python with the example's wheel installed (built here, once per session)."""
    missing = _missing()
    if missing:
        pytest.skip(f"building a wheel needs {', '.join(missing)} (requirements-build.txt)")
    out = tmp_path_factory.mktemp("external")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = _wheel(
        "--kernels",
        str(EXAMPLE / "my_kernels"),
        "--config",
        str(EXAMPLE / "my_ops.toml"),
        "--name",
        "my_ops",
        "-o",
        str(out / "dist"),
        env=env,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (wheel,) = (out / "dist").glob("my_ops-0.1.0-*.whl")
    venv.create(out / "venv", system_site_packages=True, with_pip=False, symlinks=True)
    python = out / "venv" / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*pip, "--no-deps", "--no-index", str(wheel)], check=True, env=env)
    return python


# The fake driver's prelude (`attempt`, `counter`, ON_DEVICE_1, the stream stub), for my_ops.
BODY = """
report |= {"file": my_ops.__file__, "ops": native.build_ops()}
launches = lambda: counter("n_launches")
x, y = torch.randn(3, 300, dtype=torch.bfloat16), torch.randn(3, 300, dtype=torch.bfloat16)
z = my_ops.scaled_add(x, y, 2.0)  # the checked path
out = torch.empty_like(x)
same = my_ops.scaled_add(x, y, 2.0, out=out)  # checked again: `_C.call` sees CPU tensors
report["z"] = [list(z.shape), str(z.dtype), same is out]
report["launches"] = launches()
report["streams"] = [fake.fake_cuda_launch_stream(i) for i in range(launches())]
report["fp16"] = attempt(lambda: my_ops.scaled_add(x.half(), y.half(), 1.0))
x1, y1 = torch.randn(3, 300, dtype=torch.bfloat16), torch.randn(3, 300, dtype=torch.bfloat16)
ON_DEVICE_1.update((x1.data_ptr(), y1.data_ptr()))
report["sm70"] = attempt(lambda: my_ops.scaled_add(x1, y1, 1.0))
report["shape"] = attempt(lambda: my_ops.scaled_add(x, y[:, :100], 1.0))
report["dtype"] = attempt(lambda: my_ops.scaled_add(x, y.float(), 1.0))
report["scalar"] = attempt(lambda: my_ops.scaled_add(x, y, "2"))
report["tensor"] = attempt(lambda: my_ops.scaled_add(x, [1.0], 1.0))
report["miss_class"] = my_ops.VariantMissError.__module__
report["torch_ops"] = list(my_ops.register_torch_ops())
torch.ops.my_ops.scaled_add(x, y, 1.0)
torch.ops.my_ops.scaled_add_out(out, x, y, alpha=1.0)
with torch._subclasses.FakeTensorMode():
    fx = torch.empty(5, 7, dtype=torch.bfloat16)
    report["fake"] = list(torch.ops.my_ops.scaled_add(fx, fx, 1.0).shape)
compiled = torch.compile(lambda a, b: my_ops.scaled_add(a, b, 1.0), fullgraph=True, backend="eager")
report["compiled"] = list(compiled(x, y).shape)  # traced as the op: no graph break
report["launches_total"] = launches()
report["doc"] = my_ops.scaled_add.__doc__.splitlines()[0]
maps = open("/proc/self/maps").read()
report["libs"] = sorted({line.split()[-1] for line in maps.splitlines() if "libmy_ops" in line})
try:
    import tileaot._C
    report["tileaot"] = tileaot._C.build_ops() != report["ops"]
except ImportError:
    report["tileaot"] = None
print(json.dumps(report))
"""
CALLS = PRELUDE.replace("tileaot", "my_ops") + BODY


def test_the_wheel_in_a_fresh_venv(installed, tmp_path) -> None:
    driver = build_fake_driver(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"FAKE_CUDA": "1", "FAKE_CUDA_SM": "GOOD,7.0", "LD_LIBRARY_PATH": str(driver)}
    done = subprocess.run(
        [str(installed), "-c", CALLS], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout.strip().splitlines()[-1])
    site = installed.parent.parent
    assert Path(r["file"]).resolve().is_relative_to(site.resolve()), r["file"]
    assert r["ops"] == "scaled_add"
    assert r["z"] == [[3, 300], "torch.bfloat16", True]
    assert r["launches"] == 2 and r["streams"] == [0x1000, 0x1000]
    assert r["fp16"][0] == "VariantMissError" and "fp16" in r["fp16"][1]
    assert r["sm70"][0] == "VariantMissError" and "(sm_70)" in r["sm70"][1]
    assert r["shape"] == [
        "ValueError",
        "y must have shape [3, 300] to match x (3, 300); got (3, 100)",
    ]
    assert r["dtype"][0] == "TypeError" and r["dtype"][1].startswith("y has dtype torch.float32")
    assert r["scalar"] == ["TypeError", "alpha must be a real number, got str"]
    assert r["tensor"][0] == "TypeError" and r["tensor"][1].startswith("y ")
    assert all("\n" not in e[1] for e in (r["shape"], r["dtype"], r["scalar"], r["tensor"]))
    assert r["miss_class"].startswith("my_ops")
    assert r["torch_ops"] == ["scaled_add", "scaled_add_out"]
    assert r["fake"] == [5, 7] and r["compiled"] == [3, 300] and r["launches_total"] == 5
    assert r["doc"].startswith("``out = x + alpha * y``")
    assert [Path(p).parent.parent.name for p in r["libs"]] == ["my_ops"]
    assert r["tileaot"] in (True, None)  # tileaot's own _C (if installed) loads beside it


def test_the_cpp_header_and_the_stub(installed, tmp_path) -> None:
    """<tileaot/ops.hpp> of the wheel declares tileaot::scaled_add (a C++17 syntax check);
    _ops.pyi types the Python function."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    (package,) = installed.parent.parent.glob("lib/python*/site-packages/my_ops")
    source = tmp_path / "use.cpp"
    source.write_text(
        "#include <tileaot/ops.hpp>\n"
        "void f(void* s, const tileaot::TensorView& x, const tileaot::TensorView& y,\n"
        "       const tileaot::TensorView& out) { tileaot::scaled_add(s, x, y, out, 2.0f); }\n"
    )
    include = package / "include"
    cmd = [cxx, "-std=c++17", "-fsyntax-only", f"-I{include}", str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (package / "lib" / "libmy_ops.so").is_file()
    stub = (package / "_ops.pyi").read_text()  # the functions' signatures for type checkers
    assert "def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float, *, out:" in stub


NUMERICS = """
import json, torch, my_ops
report = {}
for m, n in ((1, 1), (3, 300), (7, 1025), (64, 4096), (4096, 20000)):  # the last: > 65535 blocks
    x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
    out = torch.full_like(x, float("nan"))  # poisoned: every element must be written
    my_ops.scaled_add(x, y, -0.75, out=out)
    ref = (x.double() - 0.75 * y.double())
    # One bf16 rounding of the float32 sum (which may be one FMA): within one bf16 ulp.
    err = ((out.double() - ref).abs() / ref.abs().clamp_min(2.0**-126)).max().item()
    report[f"{m}x{n}"] = [bool(out.isnan().any()), err]
print(json.dumps(report))
"""


@pytest.mark.gpu
def test_numerics_on_the_gpu(installed, tmp_path) -> None:
    """The example's kernel on a real GPU (sm_80's cubin, or its PTX on newer GPUs)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(installed), "-c", NUMERICS], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for size, (nan, err) in json.loads(done.stdout.strip().splitlines()[-1]).items():
        assert not nan, f"{size}: elements left unwritten"
        assert err <= 2.0**-8, f"{size}: relative error {err}"
