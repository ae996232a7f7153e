"""The channel gather: output channel ``c`` is channel ``channel[c]`` of input ``source[c]``, through
row ``c`` of a [C, 256] table where ``tabled[c]`` (the row indexed by the value plus 128 for int8).

It is what channels.py makes of the data movement between convolutions (a Concat with the lookups
that requantize its inputs, a Split, a Slice, ShuffleNet's channel shuffle, a per-channel table such
as a BatchNormalization between DQ and Q): one pass over the bytes where those ops took one each.
Scheduled as TE writes it, every element picks its input through a chain of selects; ``scheduled``
instead writes the output in runs (``runs``): arithmetic progressions of output channels read from
arithmetic progressions of one input's channels, a vectorized copy where both are contiguous and no
table applies (DenseNet-121's 1024-channel gather over 7x7: 26 us; TE's select chain on a concat of
116 channels over 28x28: 270 us, this way 6.5 us).
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

OFFSETS = {"uint8": 0, "int8": 128}      # a table row's index: the value plus this


@dataclass(frozen=True)
class Run:
    """Output channels ``start + step * i`` are channels ``first + stride * i`` of input ``source``,
    for i < ``count``, through their table rows when ``tabled``; ``step`` > 0."""
    source: int
    tabled: bool
    start: int
    step: int
    first: int
    stride: int
    count: int

    @property
    def contiguous(self) -> bool:
        return self.step == 1 and self.stride == 1


def runs(source: list[int], channel: list[int], tabled: list[bool]) -> list[Run]:
    """The output channels as runs, greedily: sorted by input, then by its channel, each run extended
    while output and input channel advance by the same steps as its first two."""
    order = sorted(range(len(source)), key=lambda c: (source[c], tabled[c], channel[c], c))
    result, i = [], 0
    while i < len(order):
        c = order[i]
        key = (source[c], tabled[c])
        n = 1
        if i + 1 < len(order) and (source[order[i + 1]], tabled[order[i + 1]]) == key:
            step, stride = order[i + 1] - c, channel[order[i + 1]] - channel[c]
            while i + n < len(order) and (source[order[i + n]], tabled[order[i + n]]) == key and \
                    order[i + n] == c + step * n and channel[order[i + n]] == channel[c] + stride * n:
                n += 1
        if n == 1:
            step, stride = 1, 1
        if step < 0:             # the same run read from its other end: output channels ascending
            c, step, stride = c + step * (n - 1), -step, -stride
        result.append(Run(source[c], tabled[c], c, step, channel[c], stride, n))
        i += n
    return result


def gather(*tensors, source: list[int], channel: list[int], tabled: list[bool], layout: str = "NCHW"):
    """The reference computation: ``tensors`` are the inputs, then the [C, 256] table if any row is
    tabled; 4-D, channels on axis 1 (``layout`` NCHW) or 3 (NHWC)."""
    xs, table = (tensors[:-1], tensors[-1]) if any(tabled) else (tensors, None)
    axis = 3 if layout == "NHWC" else 1
    shape = list(xs[0].shape)
    shape[axis] = len(source)

    def value(*i):
        c, result = i[axis], tirx.const(0, table.dtype if table is not None else xs[0].dtype)
        for run in runs(source, channel, tabled):
            x = xs[run.source]
            at = list(i)
            at[axis] = run.first + run.stride * tirx.indexdiv(c - run.start, run.step)
            v = x(*at)
            if run.tabled:
                v = table[c, v.astype("int32") + OFFSETS[str(x.dtype)]]
            inside = tirx.all(c >= run.start, c <= run.start + run.step * (run.count - 1),
                              tirx.indexmod(c - run.start, run.step) == 0)
            result = tirx.if_then_else(inside, v, result)
        return result
    return te.compute(shape, value, name="gather")


def applies(func: tirx.PrimFunc) -> bool:
    return bool(func.attrs and func.attrs.get("qnn.op") == "gather")


def scheduled(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The gather ``func`` (TE's, attributes kept) written run by run: the image's rows in parallel,
    in each row one run after the other over all its pixels (NHWC: a run's table rows stay in L1
    across the row; pixel by pixel, DenseNet's 992 channels at 14x14 read their 248 KB of tables
    from L2 for every pixel: 129 us, this way 88 us), or over each channel's row (NCHW)."""
    a = func.attrs
    source, channel, tabled = ([int(v) for v in a[k]] for k in ("qnn.source", "qnn.channel", "qnn.tabled"))
    nhwc = str(a.get("qnn.layout", "NCHW")) == "NHWC"
    types = [p.ty for p in func.params]                  # each a BufferType: inputs, [table], output
    with IRBuilder() as ib, T.prim_func(private=True, s_tir=True):
        xs = [T.arg(f"x{i}", T.buffer(tuple(int(d) for d in t.shape), t.dtype))
              for i, t in enumerate(types[:-2 if any(tabled) else -1])]
        table = T.arg("table", T.buffer((len(source), 256), types[-2].dtype)) if any(tabled) else None
        out = types[-1]
        y = T.arg("y", T.buffer(tuple(int(d) for d in out.shape), out.dtype))
        n, h, w = (int(out.shape[d]) for d in ((0, 1, 2) if nhwc else (0, 2, 3)))
        # the root block: Relax's passes read a PrimFunc from it
        with T.sblock("root"), T.parallel(0, n * h) as row:
            b, i = row // h, row % h
            for run in runs(source, channel, tabled):
                if nhwc:
                    with T.serial(0, w) as j:
                        _copy(run, xs, table, y, lambda c: (b, i, j, c))
                else:
                    with T.serial(0, run.count) as k, (T.serial if run.tabled else T.vectorized)(0, w) as j:
                        _store(run, k, xs, table, y, lambda c: (b, c, i, j))
    return ib.get().with_attrs(func.attrs)


def _copy(run: Run, xs, table, y, at) -> None:
    """One pixel's run (NHWC): a vector copy where contiguous and untabled, else element by element."""
    loop = T.vectorized if run.contiguous and not run.tabled else T.serial
    with loop(0, run.count) as k:
        _store(run, k, xs, table, y, at)


def _store(run: Run, k, xs, table, y, at) -> None:
    x = xs[run.source]
    c = run.start + run.step * k
    v = x[at(run.first + run.stride * k)]
    if run.tabled:
        v = table[c, v.astype("int32") + OFFSETS[str(x.dtype)]]
    T.buffer_store(y, v, list(at(c)))
