"""int8 dot-product kernels, synthesized in stages and assembled.

* ``rows`` layout (NEON without dot product, the RFC's 4×4 pseudo-dot and QNN's int16 path):
  ``dot``: (a_i, b_j, acc) → acc' with sum(lanes acc') = sum(lanes acc) + a_i·b_j — a relational
  stage: how products land in acc's lanes is the synthesizer's choice (umull/umull2/uadalp, or
  smull/smlal2); ``reduce``: (acc_i0 … acc_i,nr-1, c_i) → c_i + per-column lane sums (addp tree).
* ``acc`` layout (v8.0 NEON, lanes kept over the K loop): ``dot``: (a_i, b_j, c_ij) → c_ij' exactly,
  c_ij's four int32 lanes each taking the products of two bytes in eight (umull, uadalp; s8s7:
  smull, smlal2, sadalp over 16 bytes, B's range keeping two products in an int16 lane); no
  reduction in the tile: its K loop sums the lanes across once.
* ``k4`` / ``k4b`` layouts (sdot/sudot by element, vpdpbusd, vpmaddubsw+vpmaddwd; int16 elements,
  vpmaddwd + vpaddd: ``group``, one k group, chained): ``row``:
  (c_i, a_i…, b_0…) → c_i' exactly, one register of C: instantiated per row and, in k4b, per
  column block.
* ``tile`` (AMX): ``tile``: one 16 × 16 accumulator tile over k, (a_g…, b_g…, c) → c' exactly,
  instantiated for every tile of C.
"""
from __future__ import annotations

from isa_specs.lanes import total
from isa_specs.ranges import LaneRange, precondition, sample
from sketches import menus
from sketches.chain import ChainSketch
from sketches.linear import LinearSketch
from synth.cegis import Problem
from synth.proof import linear_prover
from synth.int8_spec import Int8Spec
from synth.stages import Stage, StageUse


def _problem(name, isa, names, bits, ranges, out_bits, spec, constants, observe=None, split=()):
    """``split``: the prefixes of the inputs whose lanes the proof takes sign by sign (the menu's
    ``sign_cases``: instructions that read an operand's sign)."""
    problem = Problem(name, isa, names, bits, out_bits, spec,
                      sample=lambda rng, n: sample(bits, ranges, constants, rng, n),
                      pre=precondition(ranges, constants), observe=observe)
    problem.ranges, problem.constants = ranges, constants
    problem.fast_prove = linear_prover(problem, ranges, constants, [32] * len(out_bits) if not observe else [32],
                                       tuple(i for i, n in enumerate(names) if n.startswith(split) and split))
    return problem


def _sub_spec(spec: Int8Spec, mr: int, nr: int) -> Int8Spec:
    """The same layout restricted to ``mr`` rows and ``nr`` columns: the spec of one stage."""
    return Int8Spec(spec.isa, spec.types, spec.layout, mr, nr, spec.k)


def stages(spec: Int8Spec, isa) -> list[Stage]:
    menu = menus.int8(spec.isa, spec.types, spec.layout)
    consts = menu.get("constants", {})
    cnames, cbits = list(consts), [128 if spec.layout == "rows" else spec.output_bits[0]] * len(consts)
    e = spec.elem_bits
    by_name = dict(zip(spec.input_names, spec.lane_ranges()))
    if spec.layout == "rows":
        # dot: relational, acc of 4 int32 lanes (one Q register)
        acc_bits = 128
        names = ["a", "b", "acc", *cnames]
        bits = [spec.k * e, spec.k * e, acc_bits, *cbits]
        ranges = [by_name["a0"], by_name["b0"], None] + [None] * len(cnames)
        cidx = {3 + i: v for i, v in enumerate(consts.values())}
        one = _sub_spec(spec, 1, 1)

        def dot_spec(B, x):
            acc = B.lanes(x[2], 32)
            a_b = one.reference(B, [x[0], x[1], B.const(0, 32)])[0]
            return [total(B, [*acc, a_b])]
        dot = _problem("dot", isa, names, bits, ranges, [acc_bits], dot_spec, cidx,
                       observe=lambda B, outs: [total(B, B.lanes(outs[0], 32))])
        red_names = [f"acc{j}" for j in range(spec.nr)] + ["c"]
        red_bits = [acc_bits] * spec.nr + [spec.nr * 32]

        def reduce_spec(B, x):
            sums = [total(B, B.lanes(acc, 32)) for acc in x[:spec.nr]]
            return [B.join([B.add(c, s) for c, s in zip(B.lanes(x[spec.nr], 32), sums)])]
        reduce = _problem("reduce", isa, red_names, red_bits, [None] * len(red_names), [spec.nr * 32],
                          reduce_spec, {})
        return [Stage(dot, lambda n: LinearSketch(isa, menu["dot"], bits, n), range(1, 7), in_ranges=ranges),
                Stage(reduce, lambda n: LinearSketch(isa, menu["reduce"], red_bits, n), range(1, 2 * spec.nr + 2),
                      in_ranges=[None] * len(red_names))]
    if spec.layout == "acc":
        one = _sub_spec(spec, 1, 1)
        names, bits, ranges = one.input_names, one.input_bits, one.lane_ranges()
        dot = _problem("dot", isa, names, bits, ranges, one.output_bits, one.reference, {})
        # per 8 bytes of K at most a multiply, a widening accumulate and a register view (vget_low)
        return [Stage(dot, lambda n: LinearSketch(isa, menu["dot"], bits, n), range(1, 3 * spec.k // 8 + 1),
                      in_ranges=ranges)]
    if spec.layout == "tile":
        one = _sub_spec(spec, 16, 16)
        names, bits, ranges = one.input_names, one.input_bits, one.lane_ranges()
        tile = _problem("tile", isa, names, bits, ranges, one.output_bits, one.reference, {})
        return [Stage(tile, lambda n: ChainSketch(isa, menu["tile"], bits, names.index("c0_0"), n),
                      range(1, spec.k // 64 + 1), in_ranges=ranges)]
    # k4 / k4b: one register of C per stage, instantiated per row (and column block)
    one = _sub_spec(spec, 1, spec.block_columns)
    names, bits = one.input_names + cnames, one.input_bits + cbits
    ranges = one.lane_ranges() + [None] * len(cnames)
    cidx = {len(one.input_names) + i: v for i, v in enumerate(consts.values())}
    if "pairs" in menu:
        return _pair_stages(spec, isa, menu, ranges)
    if "group" in menu:
        return _group_stages(spec, isa, menu, ranges)
    row = _problem("row", isa, names, bits, ranges, one.output_bits,
                   lambda B, x: one.reference(B, x[:len(one.input_names)]), cidx)
    make = (lambda n: LinearSketch(isa, menu["row"], bits, n)) if menu.get("multiplies_in_pairs") else \
        (lambda n: ChainSketch(isa, menu["row"], bits, names.index(one.input_names[-1]), n))
    return [Stage(row, make, range(1, 3 * spec.k // 4 + 3), in_ranges=ranges)]


def _pair_stages(spec: Int8Spec, isa, menu: dict, ranges) -> list[Stage]:
    """The k4b tile of the AVX2 s8s7 kind in two stages, each minimised by CEGIS on its own (a whole
    five-instruction row of one k group did not finish in 10 minutes): ``pairs`` (a, b) -> the sixteen
    int16 sums of two products a[2l] b[2l] + a[2l+1] b[2l+1] of one k group, exact in the spec's
    ranges (proved case by case by the sign of A's lanes); ``widen`` (c, p, constants) -> c + the two
    pair sums of each int32 lane. ``assemble`` chains them over the k groups of every row and column
    block, and the kernel is proved by composing the two specs (synth/stages.py)."""
    consts = menu.get("constants", {})
    v = spec.output_bits[0]
    a_range, b_range = ranges[0], ranges[spec.k // spec.group]      # one row's inputs: a{x} for each k group, then b

    def pairs_spec(B, x):
        a, b = B.lanes(x[0], 8), B.lanes(x[1], 8)
        prod = [B.mul(B.sext(p, 16), B.sext(q, 16)) for p, q in zip(a, b)]
        return [B.join([B.add(prod[2 * l], prod[2 * l + 1]) for l in range(len(prod) // 2)])]
    pairs = _problem("pairs", isa, ["a", "b"], [v, v], [a_range, b_range], [v], pairs_spec, {},
                     split=menu.get("sign_cases", ()))
    w_names, w_bits = ["c", "p", *consts], [v, v, *[v] * len(consts)]
    w_ranges = [None, LaneRange(16, -(1 << 15), (1 << 15) - 1), *[None] * len(consts)]

    def widen_spec(B, x):
        p = B.lanes(x[1], 16)
        return [B.join([B.add(c, B.add(B.sext(p[2 * l], 32), B.sext(p[2 * l + 1], 32)))
                        for l, c in enumerate(B.lanes(x[0], 32))])]
    widen = _problem("widen", isa, w_names, w_bits, w_ranges, [v], widen_spec,
                     {2 + i: c for i, c in enumerate(consts.values())})
    return [Stage(pairs, lambda n: LinearSketch(isa, menu["pairs"], [v, v], n), range(1, 4),
                  in_ranges=[a_range, b_range]),
            Stage(widen, lambda n: LinearSketch(isa, menu["widen"], w_bits, n), range(1, 3), in_ranges=w_ranges)]


def _group_stages(spec: Int8Spec, isa, menu: dict, ranges) -> list[Stage]:
    """The k4b tile of int16 elements (``w16``) as one stage per k group, ``group``: (c, a, b) -> c plus,
    in each int32 lane, the two products of its int16 pairs (a[2l] b[2l] + a[2l+1] b[2l+1], exact: 9-bit
    operands), chained over the k groups of every row and column block by ``assemble``."""
    v = spec.output_bits[0]
    names, bits = ["c", "a", "b"], [v, v, v]
    in_ranges = [None, ranges[0], ranges[spec.k // spec.group]]

    def group_spec(B, x):
        a, b = B.lanes(x[1], 16), B.lanes(x[2], 16)
        prod = [B.mul(B.sext(p, 32), B.sext(q, 32)) for p, q in zip(a, b)]
        return [B.join([B.add(c, B.add(prod[2 * l], prod[2 * l + 1])) for l, c in enumerate(B.lanes(x[0], 32))])]
    group = _problem("group", isa, names, bits, in_ranges, [v], group_spec, {})
    return [Stage(group, lambda n: LinearSketch(isa, menu["group"], bits, n), range(1, 3), in_ranges=in_ranges)]


def assemble(spec: Int8Spec):
    """(uses, output names, constants) of the whole tile."""
    menu = menus.int8(spec.isa, spec.types, spec.layout)
    menu_consts = menu.get("constants", {})
    bits = 128 if spec.layout == "rows" else spec.output_bits[0]
    consts = {n: (v % (1 << bits), bits) for n, v in menu_consts.items()}
    cn = list(consts)
    if spec.layout == "tile":
        gs = range(spec.k // 64)
        uses = [StageUse("tile", [*[f"a{r}_{x}" for x in gs], *[f"b{c}_{x}" for x in gs], f"c{r}_{c}"],
                         [f"c{r}_{c}_out"]) for r in range(spec.mr // 16) for c in range(spec.nr // 16)]
        return uses, [u.outputs[0] for u in uses], consts
    if spec.layout == "acc":
        uses = [StageUse("dot", [f"a{i}", f"b{j}", f"c{i}_{j}"], [f"c{i}_{j}_out"])
                for i in range(spec.mr) for j in range(spec.nr)]
        return uses, [u.outputs[0] for u in uses], consts
    uses = []
    g = spec.k // spec.group
    for i in range(spec.mr):
        if spec.layout == "rows":
            accs = []
            for j in range(spec.nr):
                uses.append(StageUse("dot", [f"a{i}", f"b{j}", "zero", *cn], [f"acc{i}_{j}"]))
                accs.append(f"acc{i}_{j}")
            uses.append(StageUse("reduce", [*accs, f"c{i}"], [f"c{i}_out"]))
        elif spec.layout == "k4":
            uses.append(StageUse("row", [f"a{i}", *[f"b{x}" for x in range(g)], f"c{i}", *cn], [f"c{i}_out"]))
        elif "pairs" in menu:     # _pair_stages, chained over the k groups
            for c in range(spec.column_blocks):
                acc = f"c{i}_{c}"
                for x in range(g):
                    uses.append(StageUse("pairs", [f"a{i}_{x}", f"b{x}_{c}"], [f"p{i}_{c}_{x}"]))
                    out = f"c{i}_{c}_out" if x == g - 1 else f"c{i}_{c}_{x}"
                    uses.append(StageUse("widen", [acc, f"p{i}_{c}_{x}", *cn], [out]))
                    acc = out
        elif "group" in menu:     # _group_stages, chained over the k groups
            for c in range(spec.column_blocks):
                acc = f"c{i}_{c}"
                for x in range(g):
                    out = f"c{i}_{c}_out" if x == g - 1 else f"c{i}_{c}_{x}"
                    uses.append(StageUse("group", [acc, f"a{i}_{x}", f"b{x}_{c}"], [out]))
                    acc = out
        else:
            for c in range(spec.column_blocks):
                uses.append(StageUse("row", [*[f"a{i}_{x}" for x in range(g)], *[f"b{x}_{c}" for x in range(g)],
                                             f"c{i}_{c}", *cn], [f"c{i}_{c}_out"]))
    return uses, [u.outputs[0] for u in uses if u.outputs[0].endswith("_out")], consts
