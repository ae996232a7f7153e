"""TVM imports torch at its own import whenever torch is installed (3 s of CPU a process); the ``qsynth`` command keeps
it out (tvm_integration/torch_kept_out.py) and torch stays usable, with TVM too, by whoever imports it."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

CODE = """
import sys
from qsynth import cli
assert cli.main(["--help"]) == 0                          # any command, then what its work would import
import tvm
assert "torch" not in sys.modules, "torch imported"
import torch, tvm_ffi
print(tvm_ffi.from_dlpack(torch.arange(3, dtype=torch.int32)).numpy().tolist(), file=sys.stderr)
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed: TVM cannot import it")
def test_qsynth_imports_tvm_without_torch_and_torch_still_works_with_tvm():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1] == "[0, 1, 2]"
