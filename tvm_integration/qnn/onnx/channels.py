"""The channel data movement of the integer graph, each chain one gather (gather.py).

After the QDQ rewrite (whose rules for Concat and Split are ``concat`` and ``split_item`` here) a
Concat is its inputs' lookups (requantizations to its scale) and a concat; ShuffleNet's channel
shuffle is reshape -> transpose -> reshape; a Split or Slice along the channels a strided_slice; a
BatchNormalization between DQ and Q a per-channel table (batch_norm.py). Each is a map of the
output's channels: channel c is channel k of tensor s, through a 256-entry table or not. Maps
compose: a chain of them is one map of the tensors it starts from, tables composed at compile time,
exact. So only the tensors something else reads are written, each by one gather from the chain's
sources: DenseNet's concatenation, requantization and BatchNormalization before each convolution
become one pass; ShuffleNet's shuffled halves are read straight from the two branches.

A lookup is folded only where that adds no table reads (``_Chains.folded``); otherwise it stays the
lookup it is (vpermi2b: table_lookup.py), and the maps after it start from it.
"""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import Op

from tvm_integration.qnn.prim.gather import OFFSETS
from tvm_integration.qnn.semantics.integer_op import IntegerOp

SHUFFLE = [0, 2, 1, 3, 4]


def concat(reader, expr, out):
    """A rule of the rewrite (rewrite.QDQToInteger is ``reader``): ``Q(concat(DQ(x1), DQ(x2), ...))``,
    the concat of the integers, each input through a lookup where its parameters are not ``out``'s."""
    cat = reader.call(expr, "relax.concat")
    fields = None if cat is None else reader.value(cat.args[0])
    if not isinstance(fields, relax.Tuple):
        return None
    parts = [reader.in_output_params(f, out) for f in fields.fields]
    if any(p is None for p in parts):
        return None
    return relax.op.concat(parts, axis=int(cat.attrs.axis))


def split_item(reader, expr, out):
    """A rule of the rewrite: item i of ``split(DQ(x))``, the slice of the integers it is (x through a
    lookup where its parameters are not ``out``'s); else None."""
    item = reader.value(expr)
    split = reader.call(item.tuple_value, "relax.split") if isinstance(item, relax.TupleGetItem) else None
    x = None if split is None else reader.in_output_params(split.args[0], out)
    if x is None:
        return None
    axis, size = int(split.attrs.axis), int(split.args[0].ty.shape[int(split.attrs.axis)])
    sections = split.attrs.indices_or_sections
    edges = [0, *([int(i) for i in sections] if not isinstance(getattr(sections, "value", None), int) else
                  [size // int(sections.value) * i for i in range(1, int(sections.value))]), size]
    return relax.op.strided_slice(x, [axis], [edges[item.index]], [edges[item.index + 1]])


def fuse(mod):
    """``mod`` with each tensor that a chain of channel maps computes and something else reads
    written by one gather; the rest of the chain is left dead."""
    main = mod["main"]
    if len(main.body.blocks) != 1:
        return mod
    return _Fuser(mod, main).run()


class _Chains:
    """What each binding of ``main``'s one block is as a channel map: ``inputs[v]`` (the tensors its
    map reads) and ``step[v]`` (their maps -> its map); which tensors are written (``written``)."""

    def __init__(self, mod, main):
        self.mod = mod
        bindings = main.body.blocks[0].bindings
        self.value = {b.var: b.value for b in bindings}
        users: dict = {}
        for b in bindings:
            for v in _vars(b.value):
                users.setdefault(v, []).append(b.var)
        outputs = set(_vars(main.body.body))
        self.inputs, self.step, internal = {}, {}, set()
        for b in bindings:
            found = self.recognize(b.var, b.value, users)
            if found is not None:
                self.inputs[b.var], self.step[b.var], passed = found
                internal |= passed
        self.users, self.internal, self.written = users, internal, set()
        for b in reversed(bindings):
            v = b.var
            absorbed = [u in internal or u in self.inputs and not self.kept(u) for u in users.get(v, [])]
            if v in outputs or not all(absorbed) or self.kind(v) == "lookup" and not self.folded(v):
                self.written.add(v)

    def kind(self, v) -> str | None:
        op = IntegerOp.read(self.value[v], self.mod) if v in self.value else None
        return None if op is None else op.kind

    def kept(self, v) -> bool:
        """A lookup that is written stays as it is."""
        return v in self.written and self.kind(v) == "lookup"

    def folded(self, lookup) -> bool:
        """Whether the lookup's table goes into the maps of its readers: where those apply per-channel
        tables anyway, or where its input is itself a map (else that would be written for it alone).
        Folded into a copy the lookup's vectors (vpermi2b over 64 bytes) become a table read per byte
        (SqueezeNet's concatenations: 0.51 -> 0.78 ms)."""
        return self.into_tables(lookup) or IntegerOp.read(self.value[lookup], self.mod).inputs[0] in self.inputs

    def into_tables(self, v) -> bool:
        """Everything reading ``v`` goes, unwritten, into per-channel tables (a BatchNormalization's)."""
        def reaches(u):
            if u in self.internal:
                return all(reaches(w) for w in self.users.get(u, []))
            if self.kind(u) == "gather":
                return True
            return u in self.inputs and u not in self.written and self.kind(u) != "lookup" and self.into_tables(u)
        return bool(self.users.get(v)) and all(reaches(u) for u in self.users[v])

    def recognize(self, var, value, users):
        """(input tensors, their maps -> this map, the bindings in between) for a channel map; else None."""
        if not _image(var):
            return None
        op = IntegerOp.read(value, self.mod)
        if op is not None and op.kind == "lookup" and _image(op.inputs[0]):
            table, offset = op.constants[0], int(op.params["offset"])
            return [op.inputs[0]], lambda m: [(s, k, _compose(table, offset, t)) for s, k, t in m[0]], set()
        if op is not None and op.kind == "gather" and op.params.get("layout", "NCHW") == "NCHW":
            return list(op.inputs), lambda m: _gathered(op, m), set()
        if isinstance(value, relax.Call) and isinstance(value.op, Op):
            name = value.op.name
            if name == "relax.concat" and int(value.attrs.axis) in (1, -3):
                fields = self._value(value.args[0])
                if isinstance(fields, relax.Tuple) and all(_image(f) for f in fields.fields):
                    return list(fields.fields), lambda m: [e for part in m for e in part], set()
            if name == "relax.strided_slice" and _image(value.args[0]):
                axes, begin, end, *strides = ([int(getattr(f, "value", f)) for f in a.fields] for a in value.args[1:])
                if axes == [1] and strides in ([], [[1]]):
                    lo, hi, _ = slice(begin[0], end[0]).indices(_channels(value.args[0]))
                    return [value.args[0]], lambda m: m[0][lo:hi], set()
            if name == "relax.reshape":
                return self.shuffle(var, value, users)
        return None

    def shuffle(self, var, value, users):
        """reshape(permute_dims(reshape(x, [N, g, C/g, H, W]), [0, 2, 1, 3, 4]), [N, C, H, W])."""
        y = value.args[0]
        t = self._value(y)
        if not (_op(t, "relax.permute_dims") and [int(a) for a in t.attrs.axes] == SHUFFLE):
            return None
        z = t.args[0]
        r = self._value(z)
        if not (_op(r, "relax.reshape") and _image(r.args[0]) and users.get(y) == [var]
                and len(users.get(z, [])) == 1):
            return None
        x = r.args[0]
        shape, middle = [int(d) for d in x.ty.shape], [int(d) for d in z.ty.shape]
        groups = middle[1]
        if len(middle) != 5 or middle[0] != shape[0] or middle[3:] != shape[2:] or groups * middle[2] != shape[1]:
            return None
        per = middle[2]
        return [x], lambda m: [m[0][i * per + j] for j in range(per) for i in range(groups)], {y, z}

    def _value(self, expr):
        while isinstance(expr, relax.Var) and expr in self.value:
            expr = self.value[expr]
        return expr

    def map_of(self, v, maps):
        """The map other chains see: a written tensor starts its own."""
        if v in self.written or v not in self.inputs:
            return [(v, k, None) for k in range(_channels(v))]
        return maps[v]


@relax.expr_functor.mutator
class _Fuser(relax.PyExprMutator):
    def __init__(self, mod, main):
        super().__init__(mod)
        self.mod = mod
        self.chains = _Chains(mod, main)
        maps, self.gathers = {}, {}
        for v, inputs in self.chains.inputs.items():
            maps[v] = self.chains.step[v]([self.chains.map_of(x, maps) for x in inputs])
            if v in self.chains.written and not self.chains.kept(v):
                self.gathers[self.chains.value[v]] = (v, maps[v])

    def run(self):
        self.builder_.update_func(self.mod.get_global_var("main"), self.visit_expr(self.mod["main"]))
        return self.builder_.get()

    def visit_call_(self, call):
        return self.gather(call) if call in self.gathers else super().visit_call_(call)

    def gather(self, value):
        var, entries = self.gathers[value]
        sources = list(dict.fromkeys(s for s, _, _ in entries))
        index = {s: i for i, s in enumerate(sources)}
        tabled = [int(t is not None) for _, _, t in entries]
        dtype = str(var.ty.dtype)
        constants = (np.stack([np.zeros(256, dtype) if t is None else t for _, _, t in entries]),) if any(tabled) else ()
        params = {"source": [index[s] for s, _, _ in entries], "channel": [k for _, k, _ in entries], "tabled": tabled}
        return IntegerOp.call(self.builder_, "gather", [self.visit_expr(s) for s in sources], constants, **params)


def _gathered(op: IntegerOp, maps: list) -> list:
    """The map of a gather ``op`` of inputs whose maps are ``maps``."""
    p, table = op.params, (op.constants[0] if op.constants else None)
    result = []
    for c, (i, k) in enumerate(zip(p["source"], p["channel"])):
        s, j, inner = maps[i][k]
        offset = OFFSETS[str(op.inputs[i].ty.dtype)]
        result.append((s, j, _compose(table[c], offset, inner) if p["tabled"][c] else inner))
    return result


def _compose(table: np.ndarray, offset: int, inner: np.ndarray | None) -> np.ndarray:
    """``table`` (indexed by a value plus ``offset``) after ``inner`` (None: nothing before it)."""
    return table if inner is None else table[inner.astype(np.int64) + offset]


def _vars(expr) -> list:
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [v for f in expr.fields for v in _vars(f)]
    if isinstance(expr, relax.TupleGetItem):
        return _vars(expr.tuple_value)
    if isinstance(expr, relax.Call):
        return [v for a in expr.args for v in _vars(a)]
    return []


def _op(expr, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, Op) and expr.op.name == name


def _image(expr) -> bool:
    """An 8-bit NCHW tensor (4-D), what a gather reads and writes."""
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and ty.ndim == 4 and str(ty.dtype) in OFFSETS


def _channels(expr) -> int:
    return int(expr.ty.shape[1])
