"""Bitserial kernels, synthesized in stages and assembled. The ``tile`` layout (one whole dot product
per call):

1. ``compute``  (w, a) → lanes of per-lane popcount(w & a)          [compute sketch, Z3 proof]
2. ``reduce``   rows' compute results → one register, lane i = row i  [reduction tree, linear forms]
3. ``weights``  Σ_j 2**j R_j over weight planes (wbits > 1)           [compute sketch, linear forms]
4. ``acts``     Σ_k 2**k R_k over activation planes (abits > 1)
5. hybrid only (popcount(w&a) - popcount(~w&a) = 2 popcount(w&a) - popcount(a)), the popcount(a)
   work shared by all rows: ``act_count`` popcount(a_k) in every output lane, ``act_weights``
   P = Σ_k 2**k popcount(a_k) (abits > 1), ``correction`` 2R - (2**wbits - 1) P.

The ``acc`` layout (K-accumulating: the body of a loop over K blocks), and the ``lanes`` layout (the
same lane-wise body, its lanes output channels), need only ``compute``, a
``count`` of the activations (hybrid) and ``accumulate`` (add per-lane popcounts into wider
accumulator lanes); plane weighting, the cross-lane reduction and the hybrid correction happen once
after the loop. AVX2 (no vector popcount; acc layout only) counts bytes by nibble-table lookups: its
``compute`` and ``count`` are composites of separately synthesized parts, proved whole.

Each stage is synthesized once and instantiated where needed; the assembled kernel is then proved
against ``BitserialSpec.reference`` with every stage replaced by its (proved) specification.
"""
from __future__ import annotations

from isa_specs.lanes import total
from isa_specs.ranges import LaneRange, precondition, sample
from sketches import menus
from sketches.linear import LinearSketch
from sketches.tree import TreeSketch, shapes
from synth.cegis import Problem
from synth.proof import linear_prover
from synth.spec import BitserialSpec, lane_popcounts, register_rows
from synth.stages import Composite, Stage, StageUse


def _weighted(B, regs, lane_bits):
    """Lane-wise sum of 2**p * regs[p]."""
    columns = zip(*(B.lanes(r, lane_bits) for r in regs))
    return B.join([total(B, [B.shl(l, p) for p, l in enumerate(col)]) for col in columns])


def _ranged_problem(name, isa, names, bits, ranges, out_bits, out_lane_bits, spec, constants=None):
    constants = constants or {}
    problem = Problem(name, isa, names, bits, out_bits, spec,
                      sample=lambda rng, n: sample(bits, ranges, constants, rng, n),
                      pre=precondition(ranges, constants))
    problem.ranges, problem.constants = ranges, constants
    problem.fast_prove = linear_prover(problem, ranges, constants, out_lane_bits)
    return problem


def _with_constants(menu, R, names, bits, ranges):
    """A stage's inputs followed by the menu's constants (fixed R-bit inputs): names, bits, ranges and
    the constants' input index → value."""
    consts = menu.get("constants", {})
    cidx = {len(names) + i: v % (1 << R) for i, v in enumerate(consts.values())}
    return [*names, *consts], [*bits, *[R] * len(consts)], [*ranges, *[None] * len(consts)], cidx


def _compute_stage(name, isa, menu, R, operands, spec) -> Stage:
    """Per-lane popcounts of ``spec(B, operands)`` in the menu's lane width (``lane_bits``)."""
    L = menu["lane_bits"]
    names, bits, ranges, cidx = _with_constants(menu, R, operands, [R] * len(operands), [None] * len(operands))
    problem = _ranged_problem(name, isa, names, bits, ranges, [R], [L],
                              lambda B, x: [B.join(lane_popcounts(B, spec(B, x), L))], cidx)
    return Stage(problem, lambda size: LinearSketch(isa, menu["compute"], problem.input_bits, size), range(1, 9),
                 out_ranges=[LaneRange(L, 0, L)], in_ranges=ranges)


def stages(spec: BitserialSpec, isa) -> list[Stage]:
    R, M, ob = spec.reg_bits, spec.rows, spec.out_bits
    out_reg = M * ob
    menu = menus.bitserial(spec.isa, R, out_reg if spec.layout == "tile" else None, spec.row_bits)
    L = menu["lane_bits"]
    lane_max = L                                   # popcount of an L-bit lane

    # 1. compute: per-lane popcount(w & a), L-bit lanes
    out = [_popcount_stage("compute", isa, menu, R, ["w", "a"], lambda B, x: B.and_(x[0], x[1]))]
    if spec.layout in ("acc", "lanes"):
        return out + _acc_stages(spec, isa, menu)

    # 2. reduce: M/q registers of L-bit lanes in [0, L], q rows each → lane i = sum of row i's lanes
    q, n_regs = spec.rows_per_reg, M // spec.rows_per_reg

    def reduce_spec(B, x):
        rows = [ls for r in x for ls in register_rows(B.lanes(r, L), q)]
        return [B.join([total(B, [B.zext(l, ob) for l in ls]) for ls in rows])]
    reduce_ranges = [LaneRange(L, 0, lane_max)] * n_regs
    reduce = _ranged_problem("reduce", isa, [f"c{p}" for p in range(n_regs)], [R] * n_regs, reduce_ranges,
                             [out_reg], [ob], reduce_spec)
    # NEON's addp halves the data in one instruction; x86 needs two shuffles and an add per pair
    x86 = spec.isa != "neon"
    tree_shapes = [lv for _, lv in shapes(n_regs, 1, max_each=0 if x86 else 2, max_length=3 if x86 else 1)
                   if not x86 or len({level.length for level in lv}) == 1]   # x86: one combinator length
    out.append(Stage(reduce, lambda i: TreeSketch(isa, menu["pair"], menu["each"], n_regs, R, tree_shapes[i], out_reg),
                     range(len(tree_shapes)), out_ranges=[LaneRange(ob, 0, R)], in_ranges=reduce_ranges))

    # 3./4. weighted sums over planes: Σ_p 2**p X_p on output lanes
    bound = R
    for name, count in (("weights", spec.wbits), ("acts", spec.abits)):
        if count > 1:
            out.append(_weighted_stage(name, isa, menu, count, out_reg, ob, bound))
            bound *= 2 ** count - 1

    # 5. hybrid correction, shared by all rows: each activation plane's popcount in every output
    # lane (``act_count``), weighted by plane (``act_weights``), then 2R - (2**wbits - 1) P. One CEGIS
    # query for all of it did not finish in 10 minutes with two activation planes.
    if spec.encoding == "hybrid":
        act = LaneRange(8, 0, 255, repeat=spec.k_bits) if spec.row_bits else None    # one row's block, repeated

        def count_spec(B, x):
            first_row = register_rows(B.lanes(x[0], 8), spec.rows_per_reg)[0]
            n = total(B, [B.zext(B.popcount(b), ob) for b in first_row])
            return [B.join([n] * (out_reg // ob))]
        names, bits, ranges, cidx = _with_constants(menu, R, ["a"], [R], [act])
        problem = _ranged_problem("act_count", isa, names, bits, ranges, [out_reg], [ob], count_spec, cidx)
        out.append(Stage(problem, lambda n, p=problem: LinearSketch(isa, menu["act_count"], p.input_bits, n),
                         range(1, 8), out_ranges=[LaneRange(ob, 0, spec.k_bits)], in_ranges=ranges))
        if spec.abits > 1:
            out.append(_weighted_stage("act_weights", isa, menu, spec.abits, out_reg, ob, spec.k_bits))
        scale, pops = 2 ** spec.wbits - 1, spec.k_bits * (2 ** spec.abits - 1)
        ranges = [LaneRange(ob, 0, bound), LaneRange(ob, 0, pops)]
        problem = _ranged_problem("correction", isa, ["r", "p"], [out_reg] * 2, ranges, [out_reg], [ob],
                                  lambda B, x: [B.join([B.sub(B.add(r, r), B.mul(p, B.const(scale, ob)))
                                                        for r, p in zip(B.lanes(x[0], ob), B.lanes(x[1], ob))])])
        out.append(Stage(problem, lambda n, p=problem: LinearSketch(isa, menu["scale"], p.input_bits, n),
                         range(2, 9), in_ranges=ranges))
    return out


def _weighted_stage(name, isa, menu, count, out_reg, ob, bound) -> Stage:
    """Σ_p 2**p X_p over ``count`` registers of ``ob``-bit lanes in [0, bound]."""
    ranges = [LaneRange(ob, 0, bound)] * count
    problem = _ranged_problem(name, isa, [f"r{p}" for p in range(count)], [out_reg] * count, ranges,
                              [out_reg], [ob], lambda B, x: [_weighted(B, x, ob)])
    return Stage(problem, lambda n: LinearSketch(isa, menu["scale"], problem.input_bits, n),
                 range(count - 1, 3 * count + 1), out_ranges=[LaneRange(ob, 0, bound * (2 ** count - 1))],
                 in_ranges=ranges)


def _popcount_stage(name, isa, menu, R, operands, spec) -> Stage:
    """Per-lane popcounts of ``spec(B, operands)``: one compute sketch, or, where the menu splits
    the count (``popcount_split``: AVX2's nibble masks, counted by vpshufb table lookups), a
    composite of one part per mask (count of ``x & mask``), an optional ``mask`` part computing
    ``spec`` and a ``sum`` part, the whole proved against the stage spec."""
    stage = _compute_stage(name, isa, menu, R, operands, spec)
    if "popcount_split" not in menu:
        return stage
    L, cnames = menu["lane_bits"], list(menu.get("constants", {}))
    parts, uses, x = {}, [], operands[0]
    if len(operands) > 1:
        mask = _ranged_problem("mask", isa, operands, [R] * len(operands), [None] * len(operands), [R], [L],
                               lambda B, xs: [spec(B, xs)])
        parts["mask"] = Stage(mask, lambda n: LinearSketch(isa, menu["compute"], mask.input_bits, n), range(1, 3))
        uses.append(StageUse("mask", operands, ["x"]))
        x = "x"
    split = menu["popcount_split"]
    for p, m in enumerate(split):
        parts[f"count{p}"] = _compute_stage(f"count{p}", isa, menu, R, ["x"],
                                            lambda B, xs, m=m: B.and_(xs[0], B.const(m, R)))
        uses.append(StageUse(f"count{p}", [x, *cnames], [f"n{p}"]))
    ranges = [LaneRange(L, 0, bin(m % (1 << L)).count("1")) for m in split]
    total_problem = _ranged_problem("sum", isa, [f"n{p}" for p in range(len(split))], [R] * len(split), ranges,
                                    [R], [L], lambda B, xs: [B.join([total(B, ls) for ls in zip(*(B.lanes(v, L) for v in xs))])])
    parts["sum"] = Stage(total_problem, lambda n: LinearSketch(isa, menu["compute"], total_problem.input_bits, n),
                         range(1, len(split) + 1), in_ranges=ranges)
    uses.append(StageUse("sum", [f"n{p}" for p in range(len(split))], ["count"]))
    composite = Composite(parts, uses, ["count"])
    return Stage(stage.problem, lambda n: composite, range(1, 2), out_ranges=stage.out_ranges, in_ranges=stage.in_ranges)


def _acc_stages(spec: BitserialSpec, isa, menu) -> list[Stage]:
    """``accumulate``: acc + per-lane sums of L-bit popcount lanes (in [0, L]) into ``out_bits`` lanes,
    wrapping; ``count`` (hybrid): per-lane popcounts of the activations."""
    L, R, ob = menu["lane_bits"], spec.reg_bits, spec.out_bits
    names, bits, ranges, cidx = _with_constants(menu, R, ["acc", "c"], [R, R], [None, LaneRange(L, 0, L)])

    def accumulate_spec(B, x):
        per = ob // L
        counts = [B.zext(c, ob) for c in B.lanes(x[1], L)]
        return [B.join([total(B, [old, *counts[per * i:per * (i + 1)]]) for i, old in enumerate(B.lanes(x[0], ob))])]
    problem = _ranged_problem("accumulate", isa, names, bits, ranges, [R], [ob], accumulate_spec, cidx)
    out = [Stage(problem, lambda n: LinearSketch(isa, menu["accumulate"], problem.input_bits, n), range(1, 4),
                 in_ranges=ranges)]
    if spec.encoding == "hybrid":
        out.append(_popcount_stage("count", isa, menu, R, ["a"], lambda B, x: x[0]))
    return out


def assemble(spec: BitserialSpec):
    """The kernel as stage invocations over named registers: (uses, output names, constants)."""
    menu = menus.bitserial(spec.isa, spec.reg_bits)
    consts = list(menu.get("constants", {}))
    constants = {n: (v % (1 << spec.reg_bits), spec.reg_bits) for n, v in menu.get("constants", {}).items()}
    if spec.layout in ("acc", "lanes"):
        return (*_assemble_acc(spec, consts), constants)
    uses: list[StageUse] = []
    partial = {}
    for j in range(spec.wbits):
        for k in range(spec.abits):
            regs = []
            for p in range(spec.rows // spec.rows_per_reg):
                uses.append(StageUse("compute", [f"w{j}_{p}", f"a{k}", *consts], [f"c{j}_{k}_{p}"]))
                regs.append(f"c{j}_{k}_{p}")
            uses.append(StageUse("reduce", regs, [f"r{j}_{k}"]))
            partial[j, k] = f"r{j}_{k}"
    for k in range(spec.abits):
        if spec.wbits > 1:
            uses.append(StageUse("weights", [partial[j, k] for j in range(spec.wbits)], [f"rw_{k}"]))
            partial[0, k] = f"rw_{k}"
    result = partial[0, 0]
    if spec.abits > 1:
        uses.append(StageUse("acts", [partial[0, k] for k in range(spec.abits)], ["racts"]))
        result = "racts"
    if spec.encoding == "hybrid":
        pops = [f"p{k}" for k in range(spec.abits)]
        uses += [StageUse("act_count", [f"a{k}", *consts], [p]) for k, p in enumerate(pops)]
        if spec.abits > 1:
            uses.append(StageUse("act_weights", pops, ["pa"]))
        uses.append(StageUse("correction", [result, "pa" if spec.abits > 1 else "p0"], ["out"]))
        result = "out"
    return uses, [result], constants


def _assemble_acc(spec: BitserialSpec, consts: list[str]):
    """Per row, plane pair and activation column: compute, then accumulate into the pair's
    significance (a weight plane serves every column); per activation plane and column (hybrid):
    count, then accumulate into ``pop{k}``. Returns (uses, output names)."""
    uses: list[StageUse] = []
    current = {n: n for n in spec.accumulator_names}
    for j in range(spec.wbits):
        for k in range(spec.abits):
            for i in range(spec.weight_registers):
                for n in range(spec.cols):
                    col = spec.col(n)
                    c, acc = f"c{j}_{k}_{i}{col}", f"acc{j + k}_{i}{col}"
                    uses.append(StageUse("compute", [f"w{j}_{i}", f"a{k}{col}", *consts], [c]))
                    uses.append(StageUse("accumulate", [current[acc], c, *consts], [f"{acc}_{j}{k}"]))
                    current[acc] = f"{acc}_{j}{k}"
    if spec.encoding == "hybrid":
        for n in range(spec.cols):
            for k in range(spec.abits):
                q, pop = f"q{k}{spec.col(n)}", f"pop{k}{spec.col(n)}"
                uses.append(StageUse("count", [f"a{k}{spec.col(n)}", *consts], [q]))
                uses.append(StageUse("accumulate", [pop, q, *consts], [f"{pop}_n"]))
                current[pop] = f"{pop}_n"
    return uses, [current[n] for n in spec.accumulator_names]
