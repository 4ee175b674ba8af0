"""Access to the native module `tileaot._C`, loaded on first use.

`import tileaot` must work where `_C` is absent (a source checkout) or cannot reach a driver, so
nothing here runs at import time. The op functions call `handle()`, `native()` and
`current_stream()`; tests replace `_native` with a fake module and `current_stream` with a stub.

`fast(key, tensors, scalars, outputs)` is the ops' short path for torch tensors: one `_C.call`
that reads the tensors through torch's DLPack C exchange API and checks them in C++ (dtype,
device, layout, alignment, sizes, shapes against the variant, outputs not overlapping inputs),
taking the stream from torch. It is tried only for an (op, dtype/mode) whose handle a checked
call has `learn`ed; on any check failure it returns False and the op's checked Python path runs,
which raises the precise error (or handles what the short path leaves to it, such as empty
tensors).

`current_stream(device)` is torch's current stream. A call with non-torch (DLPack) arrays runs
inside `stream_override(stream)`, which makes `current_stream` answer that call's stream in its
thread. Only processes that make such calls pay for that check (~0.2 us): until the first one,
`current_stream` is torch's own accessor.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

_native: ModuleType | None = None
# (op, key) -> the handle `_C.lookup` returned; misses are not cached, so they stay loud.
_handles: dict[tuple[str, str], int] = {}
_version: str | None = None
# (op, fast key) -> handle, for `fast`; only filled while `_native` is the real module.
_fast: dict[tuple, int] = {}

_NOT_BUILT = (
    "tileaot's native module ({name}) is not built: this looks like a source checkout. Build "
    "the wheel from the repository root with `bash scripts/build_wheel.sh` (or `pip install "
    "-r requirements-build.txt` then `pip install --no-build-isolation .`; a plain `pip install "
    ".` cannot trace the kernels), install it and import tileaot from the installed package."
)
_NOT_LOADED = (
    "tileaot's native module ({name}) could not be loaded: {error}. Reinstall the wheel built "
    "for this platform (`pip install --force-reinstall tileaot`)."
)


def native() -> ModuleType:
    """The native module; ImportError with what to do if it is not built or cannot load."""
    global _native
    if _native is None:
        name = __name__.rpartition(".")[0] + "._C"
        try:  # not `from . import _C`: that turns "absent" into a vaguer ImportError
            _C = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise ImportError(_NOT_LOADED.format(name=name, error=e)) from e
            raise ImportError(_NOT_BUILT.format(name=name)) from e
        except ImportError as e:
            raise ImportError(_NOT_LOADED.format(name=name, error=e)) from e
        _native = _C
    return _native


def handle(op: str, key: str) -> int:
    """The dispatch handle of (op, key), looked up once; `_C.VariantMissError` if not built."""
    h = _handles.get((op, key))
    if h is None:
        h = _handles[(op, key)] = native().lookup(op, key)
    return h


def learn(key: tuple, handle: int) -> None:
    """Let `fast(key, ...)` launch `handle`: called by an op's checked path after a launch whose
    arguments were exactly the tensors the op's short path passes for `key`."""
    if type(_native) is ModuleType:  # not a test's fake or recorder: they see every launch
        _fast[key] = handle


def fast(key: tuple, tensors: tuple, scalars: tuple, outputs: int) -> bool:
    """Launch through `_C.call` if `key` was learned; False (nothing launched) if it was not,
    if a tensor is empty, or if any check fails — the caller then runs its checked path.

    `outputs`: bit i set for each tensor the kernel writes (checked against overlap). Every
    exception means "take the checked path": it names the problem precisely, and a driver
    failure there is raised again (re-running a kernel is harmless: outputs never alias inputs).
    """
    handle = _fast.get(key)
    if handle is None:
        return False
    try:
        return _native.call(handle, tensors, scalars, outputs)
    except Exception:  # noqa: BLE001 - see the docstring
        return False


def _resolve_current_stream(device: int) -> int:
    """The raw `cudaStream_t` torch considers current on `device`, as an int.

    The first call resolves torch's C accessor (`torch._C._cuda_getCurrentRawStream`, ~0.1 us)
    and rebinds `current_stream` to it, so later calls go straight to torch. The public
    `torch.cuda.current_stream()` costs ~4.5 us per call and is only the fallback.
    """
    global current_stream, _torch_stream
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:

        def raw(device: int) -> int:
            return torch.cuda.current_stream(device).cuda_stream

    _torch_stream = raw
    if current_stream is _resolve_current_stream:  # else `_override_or_torch` stays in place
        current_stream = raw
    return raw(device)


current_stream = _resolve_current_stream
_torch_stream = _resolve_current_stream  # what `_override_or_torch` falls back to
_override = threading.local()  # .stream: the stream of the DLPack call running in this thread


def _override_or_torch(device: int) -> int:
    """`current_stream` once a DLPack call has run: that call's stream inside it, else torch's."""
    stream = getattr(_override, "stream", None)
    return _torch_stream(device) if stream is None else stream


class StreamScope:
    """``holder.stream = stream`` in this thread for a with-block, restored on exit (nestable,
    re-entrant): `stream_override` here and `tileaot.use_stream` both return one."""

    def __init__(self, holder: threading.local, stream: int | None) -> None:
        self._holder, self._stream = holder, stream
        self._saved: list[int | None] = []

    def __enter__(self) -> None:
        self._saved.append(getattr(self._holder, "stream", None))
        self._holder.stream = self._stream

    def __exit__(self, *exc: object) -> None:
        self._holder.stream = self._saved.pop()


def stream_override(stream: int) -> StreamScope:
    """Make `current_stream` return `stream` in this thread, for the with-block."""
    global current_stream
    if current_stream is not _override_or_torch:
        current_stream = _override_or_torch  # once per process (or after a test's stub)
    return StreamScope(_override, stream)


def version() -> str:
    """The installed distribution's version (read once: importlib.metadata costs ~18 ms)."""
    global _version
    if _version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            _version = dist_version(__name__.rpartition(".")[0])  # this package's wheel
        except PackageNotFoundError:
            _version = "0+unknown"  # a source checkout that was never installed
    return _version
