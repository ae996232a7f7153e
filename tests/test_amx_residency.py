"""scripts/bench_amx_residency.py's driver, built as the benchmark builds it, computes the tile it times:
one call's C against numpy, on the emulation (every host) and natively where the host has AMX."""
import subprocess

import numpy as np
import pytest

from conftest import HOST_RUNS, skip_if
from scripts import bench_amx_residency as bench


def expected(kblocks: int) -> np.ndarray:
    """C = A·B over the driver's first A and B copies (its byte patterns), in the kernel's B layout."""
    a = (np.arange(32 * kblocks * 64) * 7 % 256).astype(np.int64).reshape(32, kblocks * 64)
    b = (np.arange(kblocks * 16 * 128) * 3 % 256).astype(np.uint8).view(np.int8).astype(np.int64)
    b = b.reshape(kblocks * 16, 32, 4).transpose(0, 2, 1).reshape(kblocks * 64, 32)   # row t: k index t
    return a @ b


@pytest.mark.parametrize("emulated", [True, pytest.param(False, marks=skip_if(HOST_RUNS.amx))])
def test_the_timed_driver_computes_the_tile(emulated):
    kblocks = 3
    out = subprocess.run([str(bench.driver(emulated)), str(kblocks), "1", "1", "0"], capture_output=True, text=True,
                         check=True).stdout
    c = np.array(out.split(), np.int64).reshape(32, 32)
    np.testing.assert_array_equal(c, expected(kblocks))
