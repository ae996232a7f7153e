"""Every load of the float modules' vector loops inside its buffer, in the TIR as TVM lowers it (the
default pipeline's passes up to RewriteUnsafeSelect). A read past a buffer's end that a Select
discards changes no output, but faults where the buffer ends at a page's end (issue 50's segfault in
depthwise.py): TVM simplifies a Select's value under its condition, which took the clamps off the
speculative loads of float_gemv.py, tensor_range.py and reduce_mean.py's NHWC mean."""
from __future__ import annotations

import pytest
import tvm
from tvm import ir, s_tir, tirx
from tvm.tirx import expr as E

from tvm_integration.qnn.float import float_gemv, reduce_mean, tensor_range
from tvm_integration.qnn.lower.bind import model_target

PASSES = [s_tir.transform.CanonicalizeLoop(), s_tir.transform.LowerInitBlock(),
          s_tir.transform.PlanAndUpdateBufferAllocationLocation(), s_tir.transform.ConvertBlocksToOpaque(),
          s_tir.transform.CompactBufferAllocation(), s_tir.transform.LowerMatchBuffer(),
          s_tir.transform.StmtSimplify(), s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(),
          tirx.transform.NarrowDataType(32), s_tir.transform.LoopPartition(), tirx.transform.VectorizeLoop(True),
          tirx.transform.StorageRewrite(), s_tir.transform.HoistIfThenElse(), tirx.transform.UnrollLoop(),
          s_tir.transform.RenormalizeSplitPattern(), tirx.transform.StmtSimplify(), tirx.transform.RemoveNoOp(),
          s_tir.transform.RewriteUnsafeSelect()]


def lowered(func: tirx.PrimFunc) -> tirx.PrimFunc:
    target = tvm.target.Target(model_target())
    with target:
        return tvm.ir.transform.Sequential(PASSES)(tvm.IRModule({"main": func.with_attr("target", target)}))["main"]


def loads_outside(func: tirx.PrimFunc) -> list[str]:
    """The loads of lowered ``func`` whose index may leave their buffer, given the loops' ranges and the
    branches (IfThenElse, if_then_else) that guard them; a Select guards nothing (both values load)."""
    analyzer, found = tvm.sym.Analyzer(), []

    def load(node):
        for index, size in zip(node.indices, node.source.shape):
            ramp = isinstance(index, E.Ramp)
            ends = [index.base, index.base + index.stride * (index.lanes - 1)] if ramp else [index]
            bounds = [analyzer.const_int_bound(end) for end in ends]
            if min(b.min_value for b in bounds) < 0 or max(b.max_value for b in bounds) >= int(size):
                found.append(str(node))

    def guarded(condition, then, otherwise, visit):
        expr(condition)
        with analyzer.constraint_scope(condition):
            visit(then)
        if otherwise is not None:
            with analyzer.constraint_scope(E.Not(condition)):
                visit(otherwise)

    def expr(node):
        if isinstance(node, ir.TensorLoad):
            load(node)
            children = list(node.indices)
        elif isinstance(node, ir.Call) and node.op.name.endswith("if_then_else"):
            return guarded(*node.args, expr)
        elif isinstance(node, ir.Call):
            children = list(node.args)
        elif isinstance(node, E.Let):
            expr(node.value)
            analyzer.bind(node.var, node.value)
            children = [node.body]
        elif isinstance(node, E.Select):
            children = [node.condition, node.true_value, node.false_value]
        else:
            children = [getattr(node, name) for name in ("a", "b", "value", "base") if hasattr(node, name)]
        for child in children:
            expr(child)

    def stmt(node):
        if isinstance(node, tirx.SeqStmt):
            for s in node.seq:
                stmt(s)
        elif isinstance(node, tirx.IfThenElse):
            guarded(node.condition, node.then_case, node.else_case, stmt)
        elif isinstance(node, tirx.BufferStore):
            for e in [node.value, *node.indices]:
                expr(e)
        elif isinstance(node, tirx.Evaluate):
            expr(node.value)
        else:
            if isinstance(node, tirx.For):
                analyzer.bind(node.loop_var, tvm.ir.Range.from_min_extent(node.min, node.extent))
            elif hasattr(node, "var") and hasattr(node, "value"):      # a let binding
                expr(node.value)
                analyzer.bind(node.var, node.value)
            if getattr(node, "body", None) is not None:
                stmt(node.body)
    stmt(func.body)
    return found


@pytest.mark.parametrize("k", [5, 13, 509, 512])
def test_gemv_by_transposed_b_reads_inside_its_rows(k):
    """K = 5, 13, 509: the last group of eight past the row's end (read up to 3 floats past it)."""
    assert loads_outside(lowered(float_gemv.row_times_transposed_func(k, 6))) == []


@pytest.mark.parametrize("k", [7, 510, 512])
def test_gemv_reads_inside_a_and_b(k):
    """The group selected by g, each group's loads at clamped rows (a[-4] and b's row -1 at g = 0)."""
    assert loads_outside(lowered(float_gemv.row_times_func(k, 16, bias=True))) == []


@pytest.mark.parametrize("shape", [(3, 5), (7, 37, 5), (7, 32, 5), (1,)])
def test_tensor_range_reads_inside_the_tensor(shape):
    """Sizes 15 and 1295: the last group of 16 past the end; 1120: whole groups; 1: no whole group."""
    for func in (tensor_range.range_func(shape), tensor_range.range_func(shape, neon=True),
                 tensor_range.reduce_all_func(shape, "max"), tensor_range.reduce_all_func(shape, "min")):
        assert loads_outside(lowered(func)) == []


@pytest.mark.parametrize("pairs", [reduce_mean.SSE_PAIRS, reduce_mean.NEON_PAIRS])
def test_nhwc_mean_reads_inside_the_image(pairs):
    """196 pixels in 24 pairs of packets and 4 more: the 25th pair's vectors of channels past the end."""
    assert loads_outside(lowered(reduce_mean.mean_func((1, 40, 14, 14), 2, True, "NHWC", pairs))) == []


def test_the_check_sees_a_read_past_the_end():
    """A Select's load of x[i] for i up to 7 of 5 floats: found (the Select guards nothing)."""
    x = tirx.decl_buffer((5,), "float32", "x")
    y = tirx.decl_buffer((8,), "float32", "y")
    i = tirx.Var("i", "int32")
    store = tirx.BufferStore(y, tirx.Select(i < 5, x[i], tirx.const(0.0, "float32")), [i])
    body = tirx.For(i, 0, 8, tirx.ForKind.SERIAL, store)
    assert loads_outside(tirx.PrimFunc([x, y], body)) == ["x[i]"]
