"""The order a kernel's instructions are written in: only those the outputs depend on, independent
chains interleaved, and as few values in flight as the register file holds. A compiler keeps much of
this order (gcc does not schedule before register allocation on x86), so it is a choice of emission."""
from __future__ import annotations

from sketches.program import Program


def live_registers(program: Program) -> set[int]:
    """Registers the outputs depend on."""
    n = len(program.inputs)
    live, stack = set(), list(program.outputs)
    while stack:
        r = stack.pop()
        if r in live:
            continue
        live.add(r)
        if r >= n:
            stack.extend(program.body[r - n].args)
    return live


def issue_order(program: Program, live: set[int], registers: int | None = None) -> list[int]:
    """Indices of the live body instructions by dependence depth, then program order: independent
    chains (one per row of a tile) interleave, so neither an in-order core nor a small scheduling
    window waits on one chain's latency. With ``registers``, a greedy list schedule keeps the values
    in flight below that many: once at the limit it issues the ready instruction that ends the most
    live values (depth order alone issued all 72 and + cnt of a NEON A3W3 tile before its first
    reduction: 50 spill stores). Staged programs are inlined stage by stage, which puts each chain's
    steps together."""
    n = len(program.inputs)
    depth = [0] * n
    for ins in program.body:
        depth.append(1 + max((depth[a] for a in ins.args), default=0))
    body = [k for k in range(len(program.body)) if n + k in live]
    if registers is None:
        return sorted(body, key=lambda k: (depth[n + k], k))
    uses = {}
    for k in body:
        for a in set(program.body[k].args):
            uses[a] = uses.get(a, 0) + 1
    for o in program.outputs:             # stored at the end: live throughout
        uses[o] = uses.get(o, 0) + 1
    ends = lambda k: sum(uses[a] == 1 for a in set(program.body[k].args))      # values k is the last use of
    done, in_flight, order = set(range(n)), set(), []
    pending = sorted(body, key=lambda k: (depth[n + k], k))
    while pending:
        ready = [k for k in pending if all(a in done for a in program.body[k].args)]
        k = max(ready, key=ends) if len(in_flight) >= registers else ready[0]
        pending.remove(k)
        order.append(k)
        done.add(n + k)
        in_flight.add(n + k)
        for a in set(program.body[k].args):
            in_flight.add(a)
            uses[a] -= 1
            if uses[a] == 0:
                in_flight.discard(a)
        if not uses.get(n + k):
            in_flight.discard(n + k)
    return order
