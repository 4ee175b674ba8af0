"""CPU tests of the torch-free path: DLPack arrays (NumPy, and a test producer) through the ops.

* Capsule reading (`tileaot._arrays.Array` over `tileaot._dlpack`): every dtype tileaot reads,
  shapes, strides, byte_offset, versioned and unversioned capsules, flags, devices, the stream
  handed to ``__dlpack__``, and that each export is handed back exactly once.
* The ops on such arrays, against the recording fake `_C` of tests/_fakes.py (CPU memory counts
  as CUDA device 0 under `cpu_as_cuda`): pointers and sizes launched, outputs allocated through
  the input's array namespace (a fake one here) or taken from ``out=``, streams, messages.
* A subprocess with torch blocked (``sys.modules['torch'] = None``) runs ops on NumPy arrays up
  to a fake `_C`: ``import tileaot`` and the calls never need torch.

`tests/_dlpack_producer.py` builds the capsules independently of tileaot's reader.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from _dlpack_producer import (  # noqa: E402
    CPU,
    CUDA,
    CUDA_HOST,
    CUDA_MANAGED,
    HostNamespace,
    OldProducer,
    Producer,
    aligned_empty,
    host,
)
from _fakes import STREAM, cpu_as_cuda, fake, tileaot  # noqa: E402, F401
from _kernel_args import pointer  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

_arrays = importlib.import_module("tileaot._arrays")
_lib = importlib.import_module("tileaot._lib")
Array = _arrays.Array
TESTS = Path(__file__).resolve().parent
PKG_PARENT = str(Path(tileaot.__file__).resolve().parent.parent)

ITEMSIZE = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2}
ITEMSIZE |= {"float16": 2, "float32": 4, "float64": 8, "bfloat16": 2}
ITEMSIZE |= {"float8_e4m3fn": 1, "float8_e5m2": 1}


def f32(*shape: int) -> np.ndarray:
    out = aligned_empty(shape, "float32")
    out[...] = np.random.default_rng(0).standard_normal(shape)
    return out


def bf16(*shape: int, namespace=None, **kwargs) -> Producer:
    return host(aligned_empty(shape, "bfloat16"), "bfloat16", namespace=namespace, **kwargs)


# --- reading capsules -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", sorted(ITEMSIZE))
@pytest.mark.parametrize("versioned", [True, False])
def test_reads_every_dtype_and_both_capsule_kinds(dtype, versioned):
    a = aligned_empty((3, 5), dtype)
    p = host(a, dtype, versioned=versioned)
    view = Array(p, 0, "x")
    assert view.dtype is _arrays.DTYPES[dtype] and view.dtype.name == dtype
    assert view.element_size() == ITEMSIZE[dtype] and view.nbytes == 15 * ITEMSIZE[dtype]
    assert view.shape == (3, 5) and view.dim() == view.ndim == 2 and view.numel() == 15
    assert view.data_ptr() == a.ctypes.data and view.obj is p
    assert view.is_contiguous() and view.stride() == (5, 1)
    assert view.device.type == "cpu" and not view.is_cuda and view.get_device() == -1
    assert repr(view.device) == "cpu" and "float" in repr(_arrays.DTYPES["float32"])


def test_reads_numpy_exports_both_ways():
    a = f32(4, 6)
    for view in (Array(a, 0, "x"), Array(a.T, 0, "x")):
        assert view.data_ptr() == a.ctypes.data and view.obj is not None
        assert view.dtype.name == "float32"
    assert Array(a, 0, "x").is_contiguous() and Array(a, 0, "x").stride() == (6, 1)
    t_view = Array(a.T, 0, "x")
    assert t_view.shape == (6, 4) and t_view.stride() == (1, 6) and not t_view.is_contiguous()


def test_old_producer_gets_an_unversioned_request():
    p = OldProducer(f32(2, 4).ctypes.data, (2, 4), "float32", owner=None)
    view = Array(p, 0, "x")
    assert view.shape == (2, 4) and p.streams == [None] and p.exported == 1


@pytest.mark.parametrize(
    "shape, strides, contiguous",
    [
        ((2, 3), (3, 1), True),
        ((2, 3), None, True),
        ((2, 3), (1, 2), False),  # a transpose
        ((2, 3), (6, 2), False),  # every other column
        ((1, 3), (99, 1), True),  # a size-1 dim may have any stride (torch's rule)
        ((3, 1), (1, 7), True),
        ((0, 3), (5, 9), True),  # empty: nothing to lay out
        ((), None, True),
    ],
)
def test_contiguity_from_strides(shape, strides, contiguous):
    view = Array(Producer(4096, shape, "float32", strides=strides), 0, "x")
    assert view.is_contiguous() is contiguous
    if strides is not None:
        assert view.stride() == strides


def test_byte_offset_is_added_to_the_data_pointer():
    a = aligned_empty((64,), "uint8")
    view = Array(Producer(a.ctypes.data + 32, (16,), "uint8", byte_offset=32, owner=a), 0, "x")
    assert view.data_ptr() == a.ctypes.data + 32


@pytest.mark.parametrize(
    "dtype, lanes, match",
    [
        ("complex64", 1, r"x has DLPack dtype \(code 5, 64 bits, 1 lanes\)"),
        ("float4_e2m1fn", 1, r"code 17, 4 bits"),
        ("float32", 4, r"code 2, 32 bits, 4 lanes"),
    ],
)
def test_unknown_dtypes_are_refused_with_the_list(dtype, lanes, match):
    with pytest.raises(TypeError, match=match + r".*reads: bool, int8.*float8_e4m3fn"):
        Array(Producer(4096, (4,), dtype, lanes=lanes), 0, "x")


def test_a_newer_major_version_is_refused():
    with pytest.raises(BufferError, match=r"x was exported as DLPack 2\.0; tileaot reads DLPack 1"):
        Array(Producer(4096, (4,), "float32", version=(2, 0)), 0, "x")


def test_no_dlpack_device_is_a_type_error():
    class Half:
        def __dlpack__(self, **kwargs):
            raise AssertionError("not reached")

    with pytest.raises(TypeError, match=r"x \(Half\) has __dlpack__ but no __dlpack_device__"):
        Array(Half(), 0, "x")


def test_not_a_capsule_is_a_type_error():
    p = Producer(4096, (4,), "float32")
    p.__dlpack__ = lambda **kwargs: b"bytes"
    with pytest.raises(TypeError, match=r"returned bytes, not an unused DLPack capsule"):
        Array(p, 0, "x")


@pytest.mark.parametrize(
    "device, is_cuda, index, printed",
    [
        ((CUDA, 3), True, 3, "cuda:3"),
        ((CUDA_MANAGED, 1), True, 1, "cuda_managed:1"),
        ((CUDA_HOST, 0), False, -1, "cuda_host:0"),
        ((CPU, 0), False, -1, "cpu"),
    ],
)
def test_devices(device, is_cuda, index, printed):
    view = Array(Producer(4096, (4,), "float32", device=device), 5, "x")
    assert view.is_cuda is is_cuda and view.get_device() == index and repr(view.device) == printed


@pytest.mark.parametrize(
    "device, stream, asked",
    [
        ((CUDA, 0), 0, 1),  # the NULL stream is spelled 1 (legacy default) by the protocol
        ((CUDA, 0), 2, 2),  # per-thread default stream
        ((CUDA, 0), 0x7F00, 0x7F00),
        ((CUDA_MANAGED, 0), 0x7F00, 0x7F00),
        ((CPU, 0), 0x7F00, None),  # other devices take no stream
    ],
)
def test_the_stream_is_handed_to_the_producer(device, stream, asked):
    p = Producer(4096, (4,), "float32", device=device)
    Array(p, stream, "x")
    assert p.streams == [asked]


def test_each_export_is_handed_back_once_and_only_after_use(fake, cpu_as_cuda):
    x, w = bf16(4, 64), bf16(64)
    ns = HostNamespace()
    x.namespace = ns
    view = Array(x, 0, "x")
    assert x.exported == 1 and x.deleted == 0  # the view keeps its capsule alive
    del view
    gc.collect()
    assert x.deleted == 1
    y = tileaot.rms_norm(x, w)
    gc.collect()
    assert (x.exported, x.deleted, w.exported, w.deleted) == (2, 2, 1, 1)
    assert y is ns.made[0] and (y.exported, y.deleted) == (1, 1)


# --- ops on DLPack arrays ---------------------------------------------------------------------


def test_rms_norm_on_numpy(fake, cpu_as_cuda):
    x, w = f32(4, 64), f32(64)
    y = tileaot.rms_norm(x, w, 1e-5)
    assert type(y) is np.ndarray and y.shape == (4, 64) and y.dtype == np.float32
    (launch,) = fake.launches
    assert fake.lookups == [("rms_norm", "fp32")] and launch.device == 0 and launch.stream == 0
    assert launch.ptrs == (x.ctypes.data, w.ctypes.data, y.ctypes.data)
    assert launch.shapes == (4, 64, 64, 4, 64) and launch.scalars == (1e-5,)


def test_outputs_come_from_the_inputs_namespace(fake, cpu_as_cuda):
    ns = HostNamespace()
    x = bf16(2, 3, 64, namespace=ns)
    y = tileaot.rms_norm(x, bf16(64))
    assert ns.calls == [((2, 3, 64), "bfloat16", (CPU, 0))] and y is ns.made[0]
    assert pointer(fake.launches[0], "rms_norm", "y") == y.ptr
    assert fake.lookups == [("rms_norm", "bf16")]
    assert fake.launches[0].shapes == (6, 64, 64, 6, 64)


def test_a_dtype_the_framework_lacks_asks_for_out(fake, cpu_as_cuda):
    ns = HostNamespace(dtypes=("float32",))
    x = bf16(4, 256, namespace=ns)
    with pytest.raises(TypeError, match=r"float8_e4m3fn array.*has no float8_e4m3fn.*pass out="):
        tileaot.per_token_cast_fp8(x)
    assert fake.launches == []
    q = host(aligned_empty((4, 256), "float8_e4m3fn"), "float8_e4m3fn")
    scale = host(aligned_empty((4, 2), "float32"), "float32")
    q_out, s_out = tileaot.per_token_cast_fp8(x, out=(q, scale))
    assert q_out is q and s_out is scale and ns.calls == []
    (launch,) = fake.launches
    assert fake.lookups == [("per_token_cast_fp8", "bf16,g128")]
    assert launch.ptrs == (x.ptr, q.ptr, scale.ptr) and launch.shapes == (4, 256, 4, 256, 4, 2)


def test_out_that_is_read_only_or_copied_is_refused(fake, cpu_as_cuda):
    x, w = f32(4, 64), f32(64)
    for flags, why in ((1, "read-only"), (2, r"a copy \(IS_COPIED\)")):
        out = host(aligned_empty((4, 64), "float32"), flags=flags)
        with pytest.raises(ValueError, match=f"out's DLPack export is {why}.*writable"):
            tileaot.rms_norm(x, w, out=out)
    # Inputs may be read-only.
    read_only_input = host(x, flags=1, namespace=HostNamespace())
    tileaot.rms_norm(read_only_input, w)
    assert len(fake.launches) == 1


def test_out_array_is_returned_and_checked(fake, cpu_as_cuda):
    x, w = f32(4, 64), f32(64)
    out = aligned_empty((4, 64), "float32")
    assert tileaot.rms_norm(x, w, out=out) is out
    assert pointer(fake.launches[-1], "rms_norm", "y") == out.ctypes.data
    with pytest.raises(ValueError, match=r"out has shape \(4, 32\); this call writes \(4, 64\)"):
        tileaot.rms_norm(x, w, out=aligned_empty((4, 32), "float32"))
    with pytest.raises(TypeError, match=r"out has dtype int32; this call writes float32"):
        tileaot.rms_norm(x, w, out=aligned_empty((4, 64), "int32"))
    with pytest.raises(ValueError, match=r"out overlaps x in memory"):
        tileaot.rms_norm(x, w, out=x)


def test_topk_gate_allocates_int32_and_float32(fake, cpu_as_cuda):
    scores = f32(5, 64)
    idx, weights = tileaot.topk_gate(scores, 4, "sigmoid")
    assert idx.dtype == np.int32 and weights.dtype == np.float32 and idx.shape == (5, 4)
    assert fake.launches[0].ptrs == (scores.ctypes.data, idx.ctypes.data, weights.ctypes.data)


def test_use_stream_sets_the_launch_stream_per_thread(fake, monkeypatch):
    monkeypatch.setattr(importlib.import_module("tileaot._validate"), "device_index", lambda *a: 0)
    x, w = f32(4, 64), f32(64)
    cuda_w = Producer(w.ctypes.data, (64,), "float32", owner=w, device=(CUDA, 0))
    with tileaot.use_stream(0xABC):
        tileaot.rms_norm(x, w)
        with tileaot.use_stream(type("S", (), {"ptr": 0xDEF})()):  # a CuPy-like stream
            tileaot.rms_norm(x, cuda_w)
        tileaot.rms_norm(x, w)
    tileaot.rms_norm(x, w)
    with tileaot.use_stream(type("P", (), {"__cuda_stream__": lambda self: (0, 0x123)})()):
        tileaot.rms_norm(x, w)
    assert [launch.stream for launch in fake.launches] == [0xABC, 0xDEF, 0xABC, 0, 0x123]
    assert cuda_w.streams == [0xDEF]  # exported for the stream the kernel runs on
    with pytest.raises(TypeError, match=r"stream must be an int CUDA stream handle"):
        tileaot.use_stream("fast")


def test_use_stream_does_not_touch_torch_calls(fake, cpu_as_cuda):
    with tileaot.use_stream(0xABC):
        tileaot.rms_norm(torch.randn(4, 64), torch.randn(64))
    assert fake.launches[0].stream == STREAM  # torch's (the fixture's stub)


def test_a_thread_gets_its_own_stream(fake, cpu_as_cuda):
    import threading

    x, w = f32(4, 64), f32(64)
    with tileaot.use_stream(0xABC):
        worker = threading.Thread(target=tileaot.rms_norm, args=(x, w))
        worker.start()
        worker.join()
    assert [launch.stream for launch in fake.launches] == [0]


def test_messages_say_what_to_do(fake, cpu_as_cuda):
    x, w = f32(4, 64), f32(64)
    with pytest.raises(
        ValueError, match=r"x is not contiguous \(shape \(64, 4\), strides \(1, 64\)"
    ):
        tileaot.swiglu(f32(4, 64).T)
    with pytest.raises(ValueError, match=r"make a contiguous copy \(ascontiguousarray\) first"):
        tileaot.swiglu(f32(4, 64).T)
    with pytest.raises(
        TypeError, match=r"x has dtype float64; supported dtypes: bfloat16, float16"
    ):
        tileaot.rms_norm(np.zeros((4, 64)), w)
    with pytest.raises(TypeError, match=r"weight has dtype int32; it must match x \(float32\)"):
        tileaot.rms_norm(x, aligned_empty((64,), "int32"))
    off = aligned_empty((80,), "float32")
    with pytest.raises(ValueError, match=r"not 16-byte aligned.*e\.g\. copy it"):
        tileaot.swiglu(off[1:65].reshape(2, 32))
    with pytest.raises(TypeError, match=r"weight must be a torch\.Tensor, got list; without torch"):
        tileaot.rms_norm(x, [1.0])
    with pytest.raises(TypeError, match=r"weight is a numpy\.ndarray, but .* torch\.Tensor: pass"):
        tileaot.rms_norm(torch.randn(4, 64), w)
    with pytest.raises(TypeError, match=r"x has dtype float64; supported dtypes: float8_e4m3fn"):
        tileaot.transpose(np.zeros((4, 4)))
    assert fake.launches == []


def test_cpu_memory_is_refused_without_the_patch(fake):
    with pytest.raises(
        ValueError,
        match=r"x is on device 'cpu'; tileaot kernels run on CUDA devices only "
        r"\(copy it to a CUDA device first\)",
    ):
        tileaot.rms_norm(f32(4, 64), f32(64))
    pinned = Producer(4096, (4, 64), "float32", device=(CUDA_HOST, 0))
    with pytest.raises(ValueError, match=r"x is on device 'cuda_host:0'"):
        tileaot.rms_norm(pinned, f32(64))
    assert fake.launches == []


def test_every_op_takes_dlpack_arrays(fake, cpu_as_cuda, monkeypatch):
    monkeypatch.setattr(
        importlib.import_module("tileaot.engram_gate_backward"), "_sm_count", lambda d: 2
    )
    u8 = lambda *s: aligned_empty(s, "uint8")  # noqa: E731
    i32 = lambda *s: np.zeros(s, np.int32)  # noqa: E731
    ns = HostNamespace(dtypes=("float32", "int32", "uint8", "bfloat16", "float8_e4m3fn"))
    fp8 = lambda *s: host(aligned_empty(s, "float8_e4m3fn"), "float8_e4m3fn", namespace=ns)  # noqa: E731
    x_bf16 = bf16(4, 256, namespace=ns)
    calls = {
        "gemm": lambda: tileaot.gemm(bf16(4, 64, namespace=ns), bf16(8, 64)),
        "swiglu": lambda: tileaot.swiglu(f32(4, 64)),
        "swiglu_per_token_cast_fp8": lambda: tileaot.swiglu_per_token_cast_fp8(x_bf16),
        "per_block_cast_fp8": lambda: tileaot.per_block_cast_fp8(x_bf16),
        "per_token_cast_fp4": lambda: tileaot.per_token_cast_fp4(f32(4, 64)),
        "cast_back_fp8": lambda: tileaot.cast_back(fp8(4, 256), f32(4, 2), out_dtype="float32"),
        "cast_back_fp4": lambda: tileaot.cast_back(
            u8(4, 32), u8(4, 2), group_size=32, out_dtype=np.float32
        ),
        "transpose": lambda: tileaot.transpose(np.zeros((3, 4, 8), np.int16)),
        "moe_expand": lambda: tileaot.moe_expand(x_bf16, i32(4, 2), 8),
        "moe_reduce": lambda: tileaot.moe_reduce(f32(16, 64), i32(4, 2), f32(4, 2)),
        "engram_gate": lambda: tileaot.engram_gate(
            *(f32(2, 3, 64) for _ in range(3)), f32(64), f32(64)
        ),
        "engram_gate_backward": lambda: tileaot.engram_gate_backward(
            *(f32(2, 64) for _ in range(4)), f32(64), f32(64)
        ),
        "sinkhorn_normalize": lambda: tileaot.sinkhorn_normalize(f32(3, 4, 4)),
        "sinkhorn_normalize_backward": lambda: tileaot.sinkhorn_normalize_backward(
            f32(3, 4, 4), f32(3, 4, 4)
        ),
    }  # fmt: skip
    kinds, keys = {}, {}
    for name, call in calls.items():
        before = len(fake.launches)
        result = call()
        assert len(fake.launches) > before, name
        keys[name] = fake.by_handle[fake.launches[-1].handle]
        kinds[name] = [
            type(r).__name__ for r in (result if isinstance(result, tuple) else (result,))
        ]
    assert keys["cast_back_fp8"] == ("cast_back_fp8", "fp32,g128")
    assert keys["cast_back_fp4"] == ("cast_back_fp4", "fp32,g32,ue8m0")
    assert keys["transpose"] == ("transpose", "bf16") and keys["gemm"] == ("gemm", "bf16")
    assert kinds["moe_expand"] == ["Producer", "Producer", "Producer", "NoneType"]
    assert type(tileaot.moe_expand(x_bf16, i32(4, 2), 8)).__name__ == "MoeExpandResult"
    assert kinds["engram_gate_backward"] == ["ndarray"] * 5
    assert kinds["swiglu_per_token_cast_fp8"] == ["Producer", "Producer"]
    assert kinds["engram_gate"] == ["ndarray"] and kinds["transpose"] == ["ndarray"]


def test_empty_inputs_zero_what_must_be_zero(fake, cpu_as_cuda):
    x = f32(3, 0)
    q = host(aligned_empty((3, 0), "float8_e4m3fn"), "float8_e4m3fn")
    scale = aligned_empty((3, 1), "float32")
    scale[...] = 7.0
    tileaot.per_token_cast_fp8(x, None, out=(q, scale))
    assert scale.tolist() == [[0.0]] * 3 and fake.launches == []


def test_torch_calls_take_the_fast_path(fake, cpu_as_cuda, monkeypatch):
    x, w = torch.randn(4, 64), torch.randn(64)
    tileaot.rms_norm(x, w)  # the first torch tensor makes `_arrays.Tensor` torch.Tensor
    assert _arrays.Tensor is torch.Tensor

    def never(*args):
        raise AssertionError("the torch path went through the DLPack adapter")

    with monkeypatch.context() as patch:
        patch.setattr(_arrays, "foreign", never)
        patch.setattr(_arrays, "call", never)
        assert tileaot.rms_norm(x, w).shape == (4, 64) and len(fake.launches) == 2
    param = torch.nn.Parameter(torch.randn(4, 64), requires_grad=False)  # a subclass
    assert tileaot.rms_norm(param, w).shape == (4, 64) and len(fake.launches) == 3


# --- no torch at all --------------------------------------------------------------------------

_NO_TORCH_CALLS = r"""
import sys, json, types
sys.modules["torch"] = None  # `import torch` raises from here on
import numpy as np
import tileaot
from tileaot import _lib, _validate
assert "tileaot._dlpack" not in sys.modules  # ctypes is loaded by the first DLPack call only
from _dlpack_producer import HostNamespace, aligned_empty, host

launches = []
c = types.ModuleType("tileaot._C")
c.lookup = lambda op, key: f"{op}/{key}"
c.launch = lambda *args: launches.append(args)
sys.modules["tileaot._C"] = c
_validate.device_index = lambda name, t: 0  # CPU memory counts as CUDA device 0

x = aligned_empty((4, 64), "float32"); x[...] = 1.0
w = aligned_empty((64,), "float32")
y = tileaot.rms_norm(x, w)
with tileaot.use_stream(0x5EED):
    idx, weights = tileaot.topk_gate(x, 4)
ns = HostNamespace(dtypes=("float32",))
xb = host(aligned_empty((4, 256), "bfloat16"), "bfloat16", namespace=ns)
q = host(aligned_empty((4, 256), "float8_e4m3fn"), "float8_e4m3fn")
try:
    tileaot.per_token_cast_fp8(xb)
except TypeError as e:
    refused = str(e)
q_out, s_out = tileaot.per_token_cast_fp8(xb, out=(q, aligned_empty((4, 2), "float32")))
try:
    tileaot.rms_norm([[1.0]], w)
except TypeError as e:
    not_array = str(e)
print(json.dumps(dict(
    launches=[list(map(str, a[:3])) + [list(a[3]), list(a[4]), list(a[5])] for a in launches],
    want=[[x.ctypes.data, w.ctypes.data, y.ctypes.data],
          [x.ctypes.data, idx.ctypes.data, weights.ctypes.data],
          [xb.ptr, q.ptr, s_out.ctypes.data]],
    out_types=[type(y).__name__, str(idx.dtype), str(weights.dtype), q_out is q],
    refused=refused, not_array=not_array,
    torch=repr(sys.modules.get("torch")),
)))
"""


def test_ops_run_with_torch_not_importable():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PKG_PARENT, str(TESTS), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _NO_TORCH_CALLS],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    launches = result["launches"]
    assert [a[:3] for a in launches] == [
        ["rms_norm/fp32", "0", "0"],
        ["topk_gate/fp32,softmax", "0", str(0x5EED)],
        ["per_token_cast_fp8/bf16,g128", "0", "0"],
    ]
    assert [a[3] for a in launches] == result["want"]
    assert [a[4] for a in launches] == [
        [4, 64, 64, 4, 64],
        [4, 64, 4, 4, 4, 4],
        [4, 256, 4, 256, 4, 2],
    ]
    assert result["out_types"] == ["ndarray", "int32", "float32", True]
    assert "pass out=" in result["refused"]
    assert (
        "must be a torch.Tensor, got list; without torch, pass CUDA arrays" in result["not_array"]
    )
    assert result["torch"] == "None"


def test_torch_and_dlpack_calls_in_one_process_keep_their_streams(fake, cpu_as_cuda, monkeypatch):
    # Start as a fresh process does: torch's accessor not resolved yet.
    monkeypatch.setattr(_lib, "current_stream", _lib._resolve_current_stream)
    monkeypatch.setattr(_lib, "_torch_stream", _lib._resolve_current_stream)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda d: 100 + d, raising=False)
    x, w = f32(4, 64), f32(64)
    with tileaot.use_stream(7):
        tileaot.rms_norm(x, w)
    tileaot.rms_norm(torch.randn(4, 64), torch.randn(64))  # resolves torch's accessor
    tileaot.rms_norm(x, w)
    assert [launch.stream for launch in fake.launches] == [7, 100, 0]
    assert _lib.current_stream is _lib._override_or_torch  # the resolver did not replace it


class FakeLibcuda:
    """Stands in for libcuda under `tileaot._driver`: records calls, writes out-parameters."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple] = []
        self.fail = fail

    def _record(self, name: str, *args) -> int:
        self.calls.append((name, *args))
        return 999 if name == self.fail else 0

    def cuGetErrorName(self, status, name_ref):  # noqa: N802  (the driver's names)
        name_ref._obj.value = b"CUDA_ERROR_FAKE"
        return 0

    def cuDeviceGetAttribute(self, value_ref, attr, device):  # noqa: N802
        value_ref._obj.value = 132
        return self._record("cuDeviceGetAttribute", attr, device)

    def cuDeviceGet(self, dev_ref, ordinal):  # noqa: N802
        dev_ref._obj.value = ordinal
        return self._record("cuDeviceGet", ordinal)

    def cuDevicePrimaryCtxRetain(self, ctx_ref, dev):  # noqa: N802
        ctx_ref._obj.value = 0xC0 + dev.value
        return self._record("cuDevicePrimaryCtxRetain", dev.value)

    def cuCtxPushCurrent_v2(self, ctx):  # noqa: N802
        return self._record("push", ctx.value)

    def cuCtxPopCurrent_v2(self, ctx_ref):  # noqa: N802
        return self._record("pop")

    def cuMemsetD8Async(self, ptr, value, nbytes, stream):  # noqa: N802
        return self._record("memset", ptr.value, value.value, nbytes.value, stream.value)


def test_driver_calls_for_torch_free_ops(monkeypatch):
    driver = importlib.import_module("tileaot._driver")
    cuda = FakeLibcuda()
    monkeypatch.setattr(driver, "_cuda", cuda)
    monkeypatch.setattr(driver, "_contexts", {})
    assert driver.sm_count(1) == 132
    driver.zero(0x1000, 64, 1, 0xABC)
    driver.zero(0x2000, 8, 1, 0)
    assert cuda.calls == [
        ("cuDeviceGetAttribute", 16, 1),  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        ("cuDeviceGet", 1),
        ("cuDevicePrimaryCtxRetain", 1),  # once per device
        ("push", 0xC1),
        ("memset", 0x1000, 0, 64, 0xABC),
        ("pop",),
        ("push", 0xC1),
        ("memset", 0x2000, 0, 8, None),  # the NULL stream
        ("pop",),
    ]
    monkeypatch.setattr(driver, "_cuda", FakeLibcuda(fail="memset"))
    with pytest.raises(Exception, match=r"cuMemsetD8Async failed: CUDA_ERROR_FAKE \(999\)"):
        driver.zero(0x1000, 64, 1, 0)
    assert driver._cuda.calls[-1] == ("pop",)  # the context is popped on failure too


def test_empty_cuda_outputs_are_zeroed_through_the_driver(fake, monkeypatch):
    driver = importlib.import_module("tileaot._driver")
    zeroed = []
    monkeypatch.setattr(driver, "zero", lambda *args: zeroed.append(args))
    x = Producer(4096, (3, 0), "float32", device=(CUDA, 2))
    q = Producer(8192, (3, 0), "float8_e4m3fn", device=(CUDA, 2))
    scale = Producer(12288, (3, 1), "float32", device=(CUDA, 2))
    with tileaot.use_stream(0x77):
        tileaot.per_token_cast_fp8(x, None, out=(q, scale))
    assert zeroed == [(12288, 12, 2, 0x77)] and fake.launches == []


def test_an_allocation_of_the_wrong_dtype_is_caught(fake, cpu_as_cuda):
    ns = HostNamespace()
    ns.int32 = "float32"  # a framework whose "int32" is something else
    with pytest.raises(TypeError, match=r"made a float32 array of shape \(5, 4\) when asked for "):
        tileaot.topk_gate(host(f32(5, 64), namespace=ns), 4)
    assert fake.launches == []
