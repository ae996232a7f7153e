"""QLinearSoftmax's schedule (semantics/qlinear_softmax.py), on every target: ``ROW_GROUP`` rows at a time,
parallel. The rows' sums are the kernel's, each row's table entries added in order, which leaves a row
nothing to add at once: one row alone waits on every add (4 cycles apiece on llvm-mca's Cortex-A57). So
the group's rows are summed together, each a vector lane (and, as before, each summing its own row in
order), and so are their maxima and reciprocals; then the outputs, each row's in vectors.
"""
from __future__ import annotations

from tvm import s_tir, tirx

ROW_GROUP = 8               # rows summed together (semantics/qlinear_softmax.py rounds the rows up to a multiple)
VECTOR = (16, 8, 4)         # the outputs of a row computed together: the most that divides its length


def applies(func: tirx.PrimFunc) -> bool:
    return (func.attrs or {}).get("qnn.op") == "qlinear_softmax"


def scheduled(func: tirx.PrimFunc) -> tirx.PrimFunc:
    sch = s_tir.Schedule(func)
    blocks = {sch.get(b).name_hint: b for b in sch.get_child_blocks(sch.get_sblock("root"))}
    for name in ("top", "total"):
        row, reduction = sch.get_loops(blocks[name])
        group, lane = sch.split(row, [None, ROW_GROUP])
        sch.reorder(group, reduction, lane)
        sch.parallel(group)
        sch.vectorize(lane)
    if "reciprocal" in blocks:
        group, lane = sch.split(sch.get_loops(blocks["reciprocal"])[0], [None, ROW_GROUP])
        sch.parallel(group)
        sch.vectorize(lane)
    *rows, length = sch.get_loops(blocks["qlinear_softmax"])
    sch.parallel(sch.fuse(*rows) if len(rows) > 1 else rows[0])
    width = next((w for w in VECTOR if sch.get(length).extent.value % w == 0), None)
    if width:
        sch.vectorize(sch.split(length, [None, width])[1])
    return sch.mod["main"]
