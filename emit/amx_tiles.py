"""An AMX program as C: tile dot products on tile registers, their operands loaded straight from memory
with their strides (``_tile_loadd``), in the three phases a K loop needs."""
from __future__ import annotations

from emit import EmitError
from emit.convention import Layout, Slot
from emit.schedule import issue_order
from emit.steps import Step, address
from sketches.program import Program

ACC_TILES, A_TILES, B_TILES = (0, 1, 2, 3), (4, 5), (6, 7)


def config_bytes(tiles: list[tuple[int, int]]) -> list[int]:
    """The 64-byte ``ldtilecfg`` operand, as ``sttilecfg`` reads it back: palette 1, then per tile
    its bytes per row (uint16 at 16 + 2i) and rows (byte 48 + i)."""
    cfg = [0] * 64
    cfg[0] = 1
    for i, (rows, colsb) in enumerate(tiles):
        cfg[16 + 2 * i: 18 + 2 * i] = colsb.to_bytes(2, "little")
        cfg[48 + i] = rows
    return cfg


def _strided(lay: Layout, slot: Slot) -> tuple[str, str]:
    """(address, stride in bytes) of a tile's rows: one piece per row, consecutive rows, same offset."""
    first = slot.pieces[0]
    if any((p.buffer, p.row, p.offset) != (first.buffer, first.row + i, first.offset) for i, p in enumerate(slot.pieces)):
        raise EmitError("a tile operand must be consecutive rows of one buffer at one offset")
    buf = lay.buffers[first.buffer]
    return address(lay, first), f"{buf.unit} * {buf.name}_stride" if buf.unit != 1 else f"{buf.name}_stride"


def tile_steps(program: Program, lay: Layout, forms: list, live: set[int]) -> tuple[dict[str, list[Step]], dict]:
    """A program of tile dot products: each accumulator chain (C tile → dp → dp …) stays in one of
    tmm0-3; A operands rotate through tmm4-5 and B operands through tmm6-7, loaded from memory only
    when not already resident (least recently loaded register reused). Returns the steps in three
    phases (``enter``: C tile loads, ``body``: A/B loads and dot products, ``leave``: C tile stores;
    a K loop repeats the body) and the tile shape the configuration must declare."""
    n = len(program.inputs)
    bits = list(program.input_bits) + [f.result_bits for _, f in forms]
    for k, (ins, (_, form)) in enumerate(zip(program.body, forms)):
        if n + k in live and [bits[a] for a in ins.args] != list(form.operand_bits):
            raise EmitError(f"{ins.op}: operand width mismatch: registers of {[bits[a] for a in ins.args]} bits "
                            f"for operands of {list(form.operand_bits)}")
    shapes = {(f.params["M"], f.params["N"], f.params["K"]) for k, (_, f) in enumerate(forms) if n + k in live}
    if len(shapes) != 1:
        raise EmitError(f"a tile program needs one tile shape, got {sorted(shapes)}")
    uses = {r: [k for k, ins in enumerate(program.body) if n + k in live and r in ins.args] for r in live}
    acc, enter, steps, leave = {}, [], [], []
    for chains, r in enumerate(program.outputs):     # walk each chain back to its C input
        chain, x = [], r
        while x >= n:
            chain.append(x)
            x = program.body[x - n].args[0]
        if chains == len(ACC_TILES) or x in acc:
            raise EmitError(f"a tile program has at most {len(ACC_TILES)} independent accumulator chains")
        for y in [x, *chain[1:]]:
            if len(uses[y]) != 1 or program.body[uses[y][0]].args[0] != y or y in program.body[uses[y][0]].args[1:]:
                raise EmitError(f"{program.name(y)} must feed exactly one tile dot product, as its accumulator")
        tmm = ACC_TILES[chains]
        acc.update({y: tmm for y in [x, *chain]})
        enter.append(Step("tileload", program.name(x), fields={"tmm": tmm, "at": _strided(lay, lay.inputs[program.name(x)])}))
    resident = {A_TILES: [], B_TILES: []}            # (input register, tmm), least recent first
    for k in issue_order(program, live):
        ins, (_, form) = program.body[k], forms[k]
        regs = []
        for r, pool in zip(ins.args[1:], (A_TILES, B_TILES)):
            have = dict(resident[pool])
            if r not in have:
                free = [t for t in pool if t not in have.values()]
                tmm = free[0] if free else resident[pool].pop(0)[1]
                resident[pool] = [(x, t) for x, t in resident[pool] if t != tmm] + [(r, tmm)]
                steps.append(Step("tileload", program.name(r), fields={"tmm": tmm, "at": _strided(lay, lay.inputs[program.name(r)])}))
                have[r] = tmm
            regs.append(have[r])
        steps.append(Step("tiledp", program.name(n + k), expr=form.intrinsic,
                          fields={"tmm": (acc[n + k], *regs), "op": str(ins.op)}))
    for r, slot in zip(program.outputs, lay.outputs):
        leave.append(Step("tilestore", program.name(r), fields={"tmm": acc[r], "at": _strided(lay, slot)}))
    (M, N, K), = shapes
    rows_bytes = [(M, 4 * N)] * len(ACC_TILES) + [(M, K)] * len(A_TILES) + [(K // 4, 4 * N)] * len(B_TILES)
    return {"enter": enter, "body": steps, "leave": leave}, {"tiles": rows_bytes, "bytes": config_bytes(rows_bytes)}
