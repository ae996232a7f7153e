"""Bit-packing as a layout transformation (the synthesis paper's §3.1): a d-dimensional tensor of
``bits``-bit unsigned integers becomes d+1 dimensions, its reduction axis turned into packed words
and a new bit-plane axis inserted.

``Packing(axis, bit_axis, word)``: the reduction ``axis`` of the input is replaced by
``ceil(K / word bits)`` words (bit b of word t is element ``t * word_bits + b`` of that axis; the
tail is zero bits, which contribute nothing to any bitserial dot product), and plane p (bit p of
every element) is put at position ``bit_axis`` of the result. The same map runs in numpy (weights,
once, at compile time) and as a TE compute (activations, at run time inside the operator).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import te, tirx

WORDS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}


@dataclass(frozen=True)
class Packing:
    axis: int            # the reduction axis of the input
    bit_axis: int        # where the bit-plane axis goes in the result
    word: str = "uint64"

    def __post_init__(self):
        if self.word not in WORDS:
            raise ValueError(f"packed word must be one of {', '.join(WORDS)}, got {self.word!r}")

    @property
    def word_bits(self) -> int:
        return WORDS[self.word]

    def words(self, k: int) -> int:
        return -(-k // self.word_bits)

    def shape(self, shape: tuple[int, ...], bits: int, words: int | None = None) -> tuple[int, ...]:
        """The packed shape of an input of ``shape`` (``words``: pad the word axis to this many)."""
        out = list(shape)
        out[self.axis] = words or self.words(shape[self.axis])
        out.insert(self.bit_axis, bits)
        return tuple(out)

    def numpy(self, x: np.ndarray, bits: int, words: int | None = None) -> np.ndarray:
        """Pack ``x`` (integers in [0, 2**bits)) in numpy."""
        x = np.asarray(x)
        if x.size and (x.min() < 0 or x.max() >= 1 << bits):
            raise ValueError(f"values must be in [0, {1 << bits}) to pack {bits} bit-planes")
        words = words or self.words(x.shape[self.axis])
        last = np.moveaxis(x, self.axis, -1).astype(np.uint8 if bits <= 8 else np.uint64)
        padded = np.zeros((*last.shape[:-1], words * self.word_bits), last.dtype)
        padded[..., :last.shape[-1]] = last
        planes = [np.packbits((padded >> p) & 1, axis=-1, bitorder="little").view(self.word) for p in range(bits)]
        stacked = np.moveaxis(np.stack(planes, axis=0), -1, self.axis + 1)      # (bits, ...input axes)
        return np.ascontiguousarray(np.moveaxis(stacked, 0, self.bit_axis))

    def te(self, x: te.Tensor, bits: int, words: int | None = None, name: str = "bitpack",
           unrolled: bool = False, vector: bool = False) -> te.Tensor:
        """Pack ``x`` at run time: a TE compute, each word an OR (as a sum of distinct bits) over its
        ``word_bits`` elements; elements past the axis are zero bits. ``unrolled``: the sum written
        out term by term, no reduction axis, so that the compute is elementwise over every axis of the
        result (and a schedule can vectorize along any of them). ``vector``: each word the
        reinterpretation of a vector of ``word_bits`` booleans (``vector_bits``), which LLVM emits as a
        mask move (AVX-512: one vpmovb2m and kmovq per 64 elements)."""
        if vector:
            return self._vector_te(x, bits, words, name)
        k = x.shape[self.axis]
        shape = self.shape(tuple(int(s) for s in x.shape), bits, words)

        def bit(index, plane, b):
            index = list(index)
            index[self.axis] = index[self.axis] * self.word_bits + b
            inside = index[self.axis] < k
            index[self.axis] = tirx.min(index[self.axis], k - 1)
            value = (x[tuple(index)].astype(self.word) >> plane.astype(self.word)) & tirx.const(1, self.word)
            return tirx.if_then_else(inside, value << tirx.const(b, self.word) if isinstance(b, int)
                                     else value << b.astype(self.word), tirx.const(0, self.word))

        def word(*index):
            index = list(index)
            plane = index.pop(self.bit_axis)
            if unrolled:
                terms = [bit(index, plane, b) for b in range(self.word_bits)]
                while len(terms) > 1:           # a balanced tree of ORs
                    terms = [terms[i] | terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
                return terms[0]
            b = te.reduce_axis((0, self.word_bits), name="b")
            return te.sum(bit(index, plane, b), axis=b)
        return te.compute(shape, word, name=name)

    def _vector_te(self, x: te.Tensor, bits: int, words: int | None, name: str) -> te.Tensor:
        """``[*packed shape, word_bits]`` booleans (``<name>_bits``: bit p of element t * word_bits + b,
        False past the axis) and the packed words, each one boolean vector of them reinterpreted: bit b
        of a word is lane b. A schedule computes the booleans under the word's loop, vectorized."""
        k = int(x.shape[self.axis])
        shape = self.shape(tuple(int(s) for s in x.shape), bits, words)
        wb = self.word_bits

        def bit(*index):
            *index, b = index
            plane = index.pop(self.bit_axis)
            element = index[self.axis] * wb + b
            index[self.axis] = tirx.min(element, k - 1)
            value = (x[tuple(index)] >> plane.astype(x.dtype)) & tirx.const(1, x.dtype)
            return tirx.all(element < k, value != tirx.const(0, x.dtype))
        flags = te.compute((*shape, wb), bit, name=f"{name}_bits")
        return te.compute(shape, lambda *index: tirx.call_intrin(
            self.word, "tirx.reinterpret", flags[(*index, tirx.Ramp(0, 1, wb))]), name=name)
