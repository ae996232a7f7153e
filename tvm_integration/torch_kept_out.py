"""TVM imports torch while it is itself imported, whenever torch is installed (``tvm_ffi/__init__.py``, a workaround for
a symbol clash seen on Windows; tvm_ffi's optional torch DLPack extension; ``tvm.relax.base_py_module``): about 3 s
of CPU in every process that imports TVM, though nothing qsynth runs passes torch tensors to TVM. TVM has no switch
that stops it. ``keep_torch_out_of_tvm()``, called by the entry points (the ``qsynth`` command, the test suite),
refuses torch to TVM's own imports while TVM is being imported, and to nothing else: torch stays importable by any
other module, and by TVM's functions when they run; once imported it is TVM's too (``sys.modules`` is read before any
finder)."""
from __future__ import annotations

import importlib.abc
import sys

_TVM = ("tvm", "tvm_ffi")
_IMPORT_MACHINERY = ("importlib", "_frozen_importlib")


class _NoTorchWhileTvmImports(importlib.abc.MetaPathFinder):
    """Finds nothing; refuses ``torch`` to an import statement of TVM's run while a TVM module is being imported."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" and _tvm_imports_itself(sys._getframe(1)):
            raise ModuleNotFoundError("torch is kept out of TVM's import (tvm_integration.torch_kept_out)", name=name)
        return None


def _package(frame) -> str:
    return frame.f_globals.get("__name__", "").split(".")[0]


def _tvm_imports_itself(frame) -> bool:
    """Whether the statement importing (the first frame outside the import machinery) is TVM's, and a TVM module's
    body is on the stack."""
    while frame is not None and _package(frame) in _IMPORT_MACHINERY:
        frame = frame.f_back
    if frame is None or _package(frame) not in _TVM:
        return False
    while frame is not None:
        if frame.f_code.co_name == "<module>" and _package(frame) in _TVM:
            return True
        frame = frame.f_back
    return False


def keep_torch_out_of_tvm() -> None:
    """From now on in this process, TVM does not import torch while it is being imported (idempotent)."""
    if not any(isinstance(finder, _NoTorchWhileTvmImports) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NoTorchWhileTvmImports())
