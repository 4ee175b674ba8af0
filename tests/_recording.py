"""The real native module with its lookups and launches recorded, for GPU tests that must show
a call failed before reaching a kernel (`recording(monkeypatch)` installs it)."""

from __future__ import annotations

import importlib
from typing import Any

from _fakes import Launch

_lib = importlib.import_module("tileaot._lib")


class Recorder:
    def __init__(self, native: Any) -> None:
        self.native, self.launches, self.lookups = native, [], []

    def lookup(self, op: str, key: str) -> int:
        self.lookups.append((op, key))
        return self.native.lookup(op, key)

    def launch(self, *args: Any) -> None:
        self.launches.append(Launch(*args))
        self.native.launch(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.native, name)


def recording(monkeypatch: Any) -> Recorder:
    """Puts a Recorder of the real native module in front of the ops (handle and short-path
    caches emptied, so every launch goes through `launch` and is recorded)."""
    rec = Recorder(_lib.native())
    monkeypatch.setattr(_lib, "_native", rec)
    monkeypatch.setattr(_lib, "_handles", {})
    monkeypatch.setattr(_lib, "_fast", {})  # and no short path: `learn` ignores a Recorder
    return rec
