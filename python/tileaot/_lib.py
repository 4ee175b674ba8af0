"""Access to the native module `tileaot._C`, loaded on first use.

`import tileaot` must work where `_C` is absent (a source checkout) or cannot reach a driver, so
nothing here runs at import time. The op functions call `handle()`, `native()` and
`current_stream()`; tests replace `_native` with a fake module and `current_stream` with a stub.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_native: ModuleType | None = None
# (op, key) -> the handle `_C.lookup` returned; misses are not cached, so they stay loud.
_handles: dict[tuple[str, str], int] = {}
_version: str | None = None

_NOT_BUILT = (
    "tileaot's native module ({name}) is not built: this looks like a source checkout. Build "
    "and install the wheel from the repository root (`pip install .`, see README.md) and import "
    "tileaot from the installed package."
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


def _resolve_current_stream(device: int) -> int:
    """The raw `cudaStream_t` torch considers current on `device`, as an int.

    The first call resolves torch's C accessor (`torch._C._cuda_getCurrentRawStream`, ~0.1 us)
    and rebinds `current_stream` to it, so later calls go straight to torch. The public
    `torch.cuda.current_stream()` costs ~4.5 us per call and is only the fallback.
    """
    global current_stream
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:

        def raw(device: int) -> int:
            return torch.cuda.current_stream(device).cuda_stream

    current_stream = raw
    return raw(device)


current_stream = _resolve_current_stream


def version() -> str:
    """The installed distribution's version (read once: importlib.metadata costs ~18 ms)."""
    global _version
    if _version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            _version = dist_version("tileaot")
        except PackageNotFoundError:
            _version = "0+unknown"  # a source checkout that was never installed
    return _version
