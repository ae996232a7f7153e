"""isa_specs/products.py: a numpy batch's product of matrices and Z3's element-wise terms against plain
Python integers, through the AMX tile instructions, on shapes that are not square (a row taken for a
column shows) and on every byte at its bounds (where the extensions, products and sums wrap)."""
import numpy as np
import pytest
import z3

from isa_specs import amx
from isa_specs.lanes import NUMPY, Z3

SIGNED = {amx.tdpbusd: (False, True), amx.tdpbssd: (True, True), amx.tdpbsud: (True, False), amx.tdpbuud: (False, False)}
SHAPES = [(1, 1, 4), (2, 3, 8), (3, 2, 12), (4, 4, 16)]


def _inputs(M: int, N: int, K: int) -> list[np.ndarray]:
    """C, A, B as byte rows: random rows, then every byte 0xFF, 0x80, 0x7F, mixed 0xFF/0x80."""
    rng = np.random.default_rng(M * 100 + N * 10 + K)
    sizes = (4 * M * N, M * K, K * N)
    rows = [rng.integers(0, 256, (6, size), dtype=np.uint8) for size in sizes]
    edges = [np.array([[byte] * size for byte in (0xFF, 0x80, 0x7F, 0x80)], np.uint8) for size in sizes]
    edges[1][3], edges[0][3] = 0xFF, 0x7F
    return [np.concatenate([r, e]) for r, e in zip(rows, edges)]


def _python(inputs, row: int, M: int, N: int, K: int, signed) -> bytes:
    """TDPB[SU][SU]D of the Intel SDM on Python integers."""
    value = lambda byte, s: byte - 256 if s and byte >= 128 else byte
    c = inputs[0][row].view("<i4").reshape(M, N).tolist()
    a, b = inputs[1][row].reshape(M, K).tolist(), inputs[2][row].reshape(K // 4, N, 4).tolist()
    out = [[(c[m][n] + sum(value(a[m][t], signed[0]) * value(b[t // 4][n][t % 4], signed[1]) for t in range(K)))
            % 2**32 for n in range(N)] for m in range(M)]
    return np.array(out, "<u4").tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}n{}k{}".format(*s))
@pytest.mark.parametrize("op", SIGNED, ids=lambda op: op.__name__)
def test_numpy_and_z3_tile_products_match_python_integers(op, shape):
    M, N, K = shape
    inputs = _inputs(M, N, K)
    got = NUMPY.to_bytes(op(NUMPY, *[NUMPY.from_bytes(x, 8 * x.shape[1]) for x in inputs], M=M, N=N, K=K), len(inputs[0]))
    regs = [z3.BitVec(f"x{i}", 8 * x.shape[1]) for i, x in enumerate(inputs)]
    term = op(Z3, *regs, M=M, N=N, K=K)
    for row in range(len(inputs[0])):
        want = _python(inputs, row, M, N, K, SIGNED[op])
        assert got[row].tobytes() == want, f"numpy, row {row}"
        values = [(r, z3.BitVecVal(int.from_bytes(x[row].tobytes(), "little"), r.size())) for r, x in zip(regs, inputs)]
        assert z3.simplify(z3.substitute(term, *values)).as_long() == int.from_bytes(want, "little"), f"z3, row {row}"
