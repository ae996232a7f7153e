"""A third backend of the lane algebra: exact integer linear forms with intervals.

Used to prove reduction programs (adds, pairwise adds, widenings, shuffles) equivalent to their
specification without SMT. A value is a tuple of fields, low to high; each field of ``w`` bits
holds an integer linear form ``v`` over input lanes with an interval ``[lo, hi]``, and the
invariant is *the field's bit pattern equals v mod 2**w*. Bit operations and popcounts of
non-constant fields become *atoms*: fresh variables named by the operation and the exact operand
forms (an uninterpreted function: equal names denote equal values), so a kernel whose stages were
proved separately can be checked against its specification with the stage specs substituted. Wrapping adds keep the invariant; an
operation whose result depends on the actual value (zero/sign extension, splitting a field,
comparison) is allowed only when the interval makes it exact, else ``Unknown`` is raised and the
caller falls back to Z3. Two lanes are equal when their forms agree modulo 2**w: a sound proof,
and the intervals prove where no lane can overflow.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from operator import itemgetter


_variable = itemgetter(0)


class Unknown(Exception):
    """The abstraction cannot decide; never a claim that the program is wrong."""


@dataclass(frozen=True)
class Lin:
    coeffs: tuple          # sorted ((variable, coefficient), ...)
    const: int
    lo: int
    hi: int

    @staticmethod
    def constant(v: int) -> "Lin":
        return Lin((), v, v, v)

    @staticmethod
    def variable(name, lo: int, hi: int) -> "Lin":
        """A variable's key carries its own range, so any sub-sum's interval can be recomputed; one
        whose range is a single value is that constant."""
        if lo == hi:
            return Lin.constant(lo)
        return Lin((((name, lo, hi), 1),), 0, lo, hi)

    def factored(self) -> tuple["Lin", int]:
        """``(x, s)`` with this form ``s * x``, ``x`` one variable, where it is one; else ``(self, 1)``:
        products are named by their factors up to sign and scale, so (-a)(-b) is a·b."""
        if self.const or len(self.coeffs) != 1:
            return self, 1
        (key, s), = self.coeffs
        return Lin(((key, 1),), 0, key[1], key[2]), s

    def __add__(self, o: "Lin") -> "Lin":
        small, big = sorted((self.coeffs, o.coeffs), key=len)
        if len(small) <= 4:     # a sum grown term by term (an int8 tile's 256 products): insert in place
            terms = list(big)
            for v, a in small:
                i = bisect_left(terms, v, key=_variable)
                if i < len(terms) and terms[i][0] == v:
                    if terms[i][1] + a:
                        terms[i] = (v, terms[i][1] + a)
                    else:
                        del terms[i]
                else:
                    terms.insert(i, (v, a))
            coeffs = tuple(terms)
        else:
            c = dict(self.coeffs)
            for v, a in o.coeffs:
                c[v] = c.get(v, 0) + a
            coeffs = tuple(sorted((v, a) for v, a in c.items() if a))
        return Lin(coeffs, self.const + o.const, self.lo + o.lo, self.hi + o.hi)

    def scale(self, s: int) -> "Lin":
        lo, hi = sorted((self.lo * s, self.hi * s))
        return Lin(tuple((v, a * s) for v, a in self.coeffs if a * s), self.const * s, lo, hi)

    def shift(self, d: int) -> "Lin":
        return Lin(self.coeffs, self.const + d, self.lo + d, self.hi + d)

    @property
    def is_const(self) -> bool:
        return not self.coeffs


@dataclass(frozen=True)
class Field:
    w: int
    v: Lin


Value = tuple   # of Field, low to high


def _unsigned(f: Field) -> Lin:
    """The field read as an unsigned integer, exactly."""
    if 0 <= f.v.lo and f.v.hi < (1 << f.w):
        return f.v
    if -(1 << f.w) <= f.v.lo and f.v.hi < 0:
        return f.v.shift(1 << f.w)
    if f.v.is_const:
        return Lin.constant(f.v.const % (1 << f.w))
    raise Unknown(f"unsigned value of a {f.w}-bit field in [{f.v.lo}, {f.v.hi}]")


def _signed(f: Field) -> Lin:
    half = 1 << (f.w - 1)
    if -half <= f.v.lo and f.v.hi < half:
        return f.v
    if half <= f.v.lo and f.v.hi < (1 << f.w):
        return f.v.shift(-(1 << f.w))
    if f.v.is_const:
        u = f.v.const % (1 << f.w)
        return Lin.constant(u - (1 << f.w) if u >= half else u)
    raise Unknown(f"signed value of a {f.w}-bit field in [{f.v.lo}, {f.v.hi}]")


def _interval(terms, const: int) -> tuple[int, int]:
    lo = hi = const
    for (_, vlo, vhi), c in terms:
        lo += c * vlo if c > 0 else c * vhi
        hi += c * vhi if c > 0 else c * vlo
    return lo, hi


def _digits(f: Field, w: int) -> list[Lin]:
    """Split a field into ``w``-bit lanes exactly: group the terms by the ``w``-bit digit their
    coefficient's lowest set bit falls in (SWAR sums such as addp.8h over bytes), and require every
    digit's interval to lie in [0, 2**w), so no digit carries into the next."""
    n = f.w // w
    groups = [[] for _ in range(n)]
    for var, c in f.v.coeffs:
        pos = ((c & -c).bit_length() - 1) // w
        if pos >= n:
            _fail("coefficient beyond the field")
        groups[pos].append((var, c >> (w * pos)))
    if f.v.const < 0:
        _fail("negative constant in a split field")
    parts = []
    for pos, terms in enumerate(groups):
        const = (f.v.const >> (w * pos)) % (1 << w) if pos < n - 1 else f.v.const >> (w * pos)
        lo, hi = _interval(terms, const)
        if lo < 0 or hi >= (1 << w):
            _fail(f"splitting a {f.w}-bit field: digit {pos} in [{lo}, {hi}] may carry")
        parts.append(Lin(tuple(sorted(terms)), const, lo, hi))
    return parts


def _bit_count(v: int, w: int) -> int:
    return v.bit_count()


def _fail(message: str):
    raise Unknown(message)


def _single(x: Value) -> Field:
    if len(x) != 1:
        raise Unknown("arithmetic on a multi-field value")
    return x[0]


def _pair(a: Value, b: Value) -> tuple[Field, Field]:
    """Two single-field operands of one width (the semantics never mix widths: a mix is a bug)."""
    fa, fb = _single(a), _single(b)
    if fa.w != fb.w:
        raise ValueError(f"operands of {fa.w} and {fb.w} bits")
    return fa, fb


class LinearBackend:
    symbolic = False

    def width(self, x: Value) -> int:
        return sum(f.w for f in x)

    def const(self, value: int, w: int) -> Value:
        if w <= 64:
            return (Field(w, Lin.constant(value % (1 << w))),)
        return tuple(Field(64, Lin.constant((value >> (64 * i)) % (1 << 64))) for i in range(w // 64))

    def lanes(self, x: Value, w: int) -> list[Value]:
        out, pending, pending_w = [], [], 0
        for f in x:
            if f.w == w and not pending:
                out.append((f,))
            elif f.w > w:
                if pending or f.w % w:
                    raise Unknown("misaligned lanes")
                if f.v.is_const:
                    u = f.v.const % (1 << f.w)
                    parts = [Lin.constant((u >> (w * i)) % (1 << w)) for i in range(f.w // w)]
                else:
                    parts = _digits(Field(f.w, _unsigned(f)) if f.v.lo < 0 else f, w)
                out.extend((Field(w, p),) for p in parts)
            else:
                pending.append(f)
                pending_w += f.w
                if pending_w == w:
                    try:
                        total, offset = Lin.constant(0), 0
                        for p in pending:
                            total = total + _unsigned(p).scale(1 << offset)
                            offset += p.w
                        out.append((Field(w, total),))
                    except Unknown:         # keep the sub-fields: splitting the lane again stays exact
                        out.append(tuple(pending))
                    pending, pending_w = [], 0
                elif pending_w > w:
                    raise Unknown("misaligned lanes")
        if pending:
            raise Unknown("misaligned lanes")
        return out

    def join(self, parts: list[Value]) -> Value:
        return tuple(f for p in parts for f in p)

    def extract(self, x: Value, lo: int, w: int) -> Value:
        f = _single(x)
        if lo + w > f.w:
            raise ValueError(f"bits [{lo}, {lo + w}) of a {f.w}-bit value")
        if lo == 0:
            return (Field(w, f.v),)
        if f.v.is_const:
            return (Field(w, Lin.constant((f.v.const % (1 << f.w)) >> lo & ((1 << w) - 1))),)
        raise Unknown("bit extraction")

    def add(self, a, b):
        fa, fb = _pair(a, b)
        return (Field(fa.w, fa.v + fb.v),)

    def sub(self, a, b):
        fa, fb = _pair(a, b)
        return (Field(fa.w, fa.v + fb.v.scale(-1)),)

    def mul(self, a, b):
        fa, fb = _pair(a, b)
        if fb.v.is_const:
            return (Field(fa.w, fa.v.scale(fb.v.const)),)
        if fa.v.is_const:
            return (Field(fa.w, fb.v.scale(fa.v.const)),)
        # product of two variables: an atom named by the exact operand forms, whatever the field width
        # (pattern(a)·pattern(b) ≡ va·vb mod 2**w), so umull's 16-bit and the spec's 32-bit products agree;
        # a scaled variable's scale is taken out first (vpsignb's -b times vpabsb's -a is a·b)
        (x, sx), (y, sy) = fa.v.factored(), fb.v.factored()
        corners = [p * q for p in (x.lo, x.hi) for q in (y.lo, y.hi)]
        key = tuple(sorted([(x.coeffs, x.const), (y.coeffs, y.const)]))
        return (Field(fa.w, Lin.variable(("mul", key), min(corners), max(corners)).scale(sx * sy)),)

    def zext(self, a, w):
        f = _single(a)
        return (f,) if w == f.w else (Field(w, _unsigned(f)),)

    def sext(self, a, w):
        """Extending to the field's own width changes nothing mod 2**w (VNNI's SignExtend32 of an
        int32 accumulator), so it needs no knowledge of the sign."""
        f = _single(a)
        return (f,) if w == f.w else (Field(w, _signed(f)),)

    def trunc(self, a, w):
        f = _single(a)
        if w > f.w:
            raise ValueError(f"truncating a {f.w}-bit value to {w} bits")
        return (Field(w, f.v),)

    def shl(self, a, k):
        f = _single(a)
        return (Field(f.w, f.v.scale(1 << k)),) if k < f.w else self.const(0, f.w)

    @staticmethod
    def _key(f: Field):
        return (f.w, f.v.coeffs, f.v.const)

    def _atom(self, w: int, name, hi: int) -> Field:
        return Field(w, Lin.variable(name, 0, hi))

    def _unary(self, a, fn, op: str, hi):
        out = []
        for f in a:
            if f.v.is_const:
                out.append(Field(f.w, Lin.constant(fn(f.v.const % (1 << f.w), f.w) % (1 << f.w))))
            else:
                out.append(self._atom(f.w, (op, self._key(f)), hi(f.w)))
        return tuple(out)

    # Shifts move bits across field boundaries: only a lane held as one field is shifted exactly.
    def lshr(self, a, k): return self._unary((_single(a),), lambda v, w: v >> k, f"lshr{k}",
                                             lambda w: (1 << w) - 1 >> k)
    def ashr(self, a, k): return self._unary((_single(a),), lambda v, w: (v - (1 << w) if v >> (w - 1) else v) >> k,
                                             f"ashr{k}", lambda w: (1 << w) - 1)

    def popcount(self, a):
        """The count of a whole lane, one field of the lane's width: the sum of its fields' counts.
        A field whose form splits exactly into bytes d_i counts as sum popcount(d_i), the definition
        of a wide popcount; any other field's count is an atom."""
        counts = []
        for f in a:
            digits = None
            if f.w > 8 and not f.v.is_const:
                try:
                    digits = _digits(f, 8)
                except Unknown:
                    pass
            if digits is not None:
                counts += [self._unary((Field(8, d),), _bit_count, "popcount", lambda w: w)[0].v for d in digits]
            else:
                counts.append(self._unary((f,), _bit_count, "popcount", lambda w: w)[0].v)
        return (Field(self.width(a), sum(counts[1:], counts[0])),)

    # Bitwise operations act on each bit alone, so a lane split into fields is negated field by field.
    def not_(self, a): return self._unary(a, lambda v, w: ~v, "not", lambda w: (1 << w) - 1)

    def _bitwise(self, a, b, fn, op: str):
        out = []
        if [f.w for f in a] != [f.w for f in b]:
            raise Unknown("bit operation on differently split values")
        for fa, fb in zip(a, b):
            m = (1 << fa.w) - 1
            if fa.v.is_const and fb.v.is_const:
                out.append(Field(fa.w, Lin.constant(fn(fa.v.const % (1 << fa.w), fb.v.const % (1 << fa.w)))))
            elif op == "and" and 0 in (fa.v.const & m if fa.v.is_const else None, fb.v.const & m if fb.v.is_const else None):
                out.append(Field(fa.w, Lin.constant(0)))
            else:
                out.append(self._atom(fa.w, (op, *sorted([self._key(fa), self._key(fb)])), m))
        return tuple(out)

    def and_(self, a, b): return self._bitwise(a, b, lambda x, y: x & y, "and")
    def or_(self, a, b): return self._bitwise(a, b, lambda x, y: x | y, "or")
    def xor(self, a, b): return self._bitwise(a, b, lambda x, y: x ^ y, "xor")

    def _decide(self, lhs: Lin, rhs: Lin, strict: bool) -> bool:
        d = lhs + rhs.scale(-1)
        if d.hi < 0 or (not strict and d.hi <= 0):
            return True
        if d.lo >= 0 if strict else d.lo > 0:
            return False
        raise Unknown("comparison undecided by the intervals")

    def ult(self, a, b): return self._decide(_unsigned(_single(a)), _unsigned(_single(b)), True)
    def slt(self, a, b): return self._decide(_signed(_single(a)), _signed(_single(b)), True)

    def eq(self, a, b):
        d = _unsigned(_single(a)) + _unsigned(_single(b)).scale(-1)
        if d.is_const:
            return d.const == 0
        if d.lo > 0 or d.hi < 0:
            return False
        raise Unknown("equality undecided")

    def ite(self, cond, a, b):
        return a if cond else b

    def select(self, index, options):
        i = _unsigned(_single(index))
        if not i.is_const:
            raise Unknown("data-dependent lane selection")
        return options[i.const]


LINEAR = LinearBackend()


def lanes_equal(got: Value, want: Value, w: int) -> bool:
    """Both values read as ``w``-bit lanes agree for every assignment of the input variables. A lane
    kept as several fields is compared field by field, and only against the same split: False
    (not proved, never "different") when the forms do not show equality."""
    if LINEAR.width(got) != LINEAR.width(want):
        raise ValueError(f"comparing a {LINEAR.width(got)}-bit value with a {LINEAR.width(want)}-bit one")
    for g, h in zip(LINEAR.lanes(got, w), LINEAR.lanes(want, w)):
        if [f.w for f in g] != [f.w for f in h]:
            return False
        for fg, fh in zip(g, h):
            if fg.v.coeffs != fh.v.coeffs or (fg.v.const - fh.v.const) % (1 << fg.w):
                return False
    return True
