"""Weights into a tile kernel's layout, once, at compile time (numpy).

A k4-image kernel (int8.py) reads B as ``k/4`` rows of ``nr*4`` bytes: for each of the ``nr``
output columns the four weights of one k group (AVX-512 VNNI: one int32 lane per column, four k
bytes per lane). A weight matrix ``W[g, n, k]`` (output column n of group g) becomes
``Wp[g, n // nr, k // 4, n % nr, k % 4]`` (int16 tiles: groups of 2), zero-padded to whole tiles: zero weights make the padded
columns and k positions contribute nothing, whatever the (run-time packed) activations hold there.
"""
from __future__ import annotations

import numpy as np

# vpdpbusd multiplies unsigned by signed bytes: signed activations are shifted by +128 at run time
# (x ^ 0x80), and sum_k (x+128)*w = sum_k x*w + 128*sum_k w is corrected by this term per column.
ACTIVATION_SHIFT = 128


def activation_shift(data_dtype: str, a_dtype: str) -> int:
    """What the packing adds to each activation to give the kernel's A operand: +128 for int8 data
    into an unsigned A (vpdpbusd, tdpbusd), -128 for uint8 data into a signed A (the AVX2 s8s7 tile's
    vpsignb reads A's sign), else 0 (an int16 A holds either). Either is ``x ^ 0x80`` on the byte."""
    if a_dtype == "int16":
        return 0
    signed = {"uint8": False, "int8": True}
    return 0 if signed[data_dtype] == signed[a_dtype] else ACTIVATION_SHIFT if signed[data_dtype] else -ACTIVATION_SHIFT


def kernel_activation(x, data_dtype: str, dtype: str):
    """TIR: activation ``x`` (of ``data_dtype``) as the kernel's A operand of ``dtype``, shifted by
    ``activation_shift``."""
    shift = activation_shift(data_dtype, dtype)
    return ((x.astype("int32") + shift) if shift else x).astype(dtype)


# An operator's weights: int8, or int16 holding 9-bit ``w - zw`` (8-bit weights less a zero point that is
# not 0: qnn/lower/legalize.py), the w16 tiles' B domain.
NINE_BITS = (-256, 255)


def weights_error(w: np.ndarray, ndim: int, layout: str) -> str | None:
    """Why ``w`` is no operator's weights (``ndim`` dimensions, ``layout`` named in the message), or None."""
    if w.ndim == ndim and (w.dtype == np.int8 or w.dtype == np.int16 and (
            w.size == 0 or NINE_BITS[0] <= int(w.min()) and int(w.max()) <= NINE_BITS[1])):
        return None
    return f"weight must be int8 {layout}, or int16 in {list(NINE_BITS)}, got {w.dtype}{list(w.shape)}"


def round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def pack_weights(w: np.ndarray, nr: int, k_multiple: int, group: int = 4, dtype: str = "int8") -> np.ndarray:
    """``w[g, n, k]`` (int8) -> ``[g, Np/nr, Kp/group, nr, group]`` of ``dtype`` (the tile's B: k groups of
    four bytes, or of two int16 for the w16 tiles), N padded to nr and K to ``k_multiple``."""
    g, n, k = w.shape
    np_, kp = round_up(n, nr), round_up(k, k_multiple)
    padded = np.zeros((g, np_, kp), dtype=dtype)
    padded[:, :n, :k] = w
    return np.ascontiguousarray(padded.reshape(g, np_ // nr, nr, kp // group, group).transpose(0, 1, 3, 2, 4))


def folded_weight_matrix(w: np.ndarray, fold: tuple[int, int], step: int) -> np.ndarray:
    """OIHW conv weights -> ``[1, O, KH2 * step]`` for the input folded by ``fold`` (fh x fw pixels
    into channels, ops/conv2d.space_to_depth): the taps padded to whole fh x fw blocks, window row
    kh2 the ``KW2 * fh * fw * I`` bytes k = (kw2, di, dj, c), zero-padded to ``step`` bytes."""
    o, c, kh, kw = w.shape
    (fh, fw), kh2, kw2 = fold, -(-kh // fold[0]), -(-kw // fold[1])
    run = kw2 * fh * fw * c
    taps = np.zeros((o, c, kh2 * fh, kw2 * fw), w.dtype)
    taps[:, :, :kh, :kw] = w                # [o, c, kh2, di, kw2, dj] -> [o, kh2, (kw2, di, dj, c)]
    rows = taps.reshape(o, c, kh2, fh, kw2, fw).transpose(0, 2, 4, 3, 5, 1).reshape(o, kh2, run)
    return np.pad(rows, ((0, 0), (0, 0), (0, step - run))).reshape(1, o, kh2 * step)


def clamped(w: np.ndarray, lo: int, hi: int, n_padded: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``w[g, n, k]`` with every weight outside [lo, hi] clamped into it, for a tile proved for B in that
    range (the AVX2 s8s7 tiles: [-127, 127]; the byte tiles, for 9-bit weights ``w - zw``:
    [-128, 127]), and what was taken away, ``w - clamp(w)`` at those k, as a sparse correction:
    ``fix_index`` and ``fix_amount``, ``[g, n_padded, S]`` int32, for each column the k and amount of
    each clamped weight, padded with amount 0 to the largest count S (``outside``). A layer quantized to
    [-128, 127] (PyTorch's default) has few weights of -128, and u8 weights less their zero point few
    beyond [-128, 127] (the extremes of an asymmetric range whose zero point is near 128), so the
    correction reads a few activations per output where the tile reads them all. Weights already in
    range come back as they are (int8 for a byte tile), with no correction."""
    out = (w < lo) | (w > hi)
    dtype = np.int8 if lo >= -128 and hi <= 127 else w.dtype
    if not out.any():
        return w.astype(dtype, copy=False), {}
    counts = out.sum(axis=2)
    g, n, _ = w.shape
    index = np.zeros((g, n_padded, outside(w.reshape(g * n, -1), lo, hi)), np.int32)
    amount = np.zeros_like(index)
    inside = np.clip(w, lo, hi)
    for gi, ni in zip(*np.nonzero(counts)):
        ks = np.flatnonzero(out[gi, ni])
        index[gi, ni, :len(ks)], amount[gi, ni, :len(ks)] = ks, w[gi, ni, ks].astype(np.int32) - inside[gi, ni, ks]
    return inside.astype(dtype), {"fix_index": index, "fix_amount": amount}


def outside(columns: np.ndarray, lo: int, hi: int) -> int:
    """The most weights of one output column (a row of ``columns``, ``[N, depth]``) outside [lo, hi]: the
    terms of ``clamped``'s correction per output."""
    return int(((columns < lo) | (columns > hi)).sum(axis=1).max(initial=0))


def correction(params: dict, g, n, activation):
    """TIR: the sparse correction of ``clamped`` for output column (g, n): the sum over its clamped weights
    of their amount times ``activation(k)`` (int32, the activation the weight multiplies), or 0."""
    if "fix_index" not in params:
        return 0
    index, amount = params["fix_index"], params["fix_amount"]
    return sum(amount[g, n, s] * activation(index[g, n, s]) for s in range(int(index.shape[2])))


def shift_compensation(w: np.ndarray, shift: int) -> np.ndarray:
    """int32 ``[g, n]`` to add to the accumulators of activations shifted by ``shift``: -shift * sum_k w."""
    return (-shift * w.astype(np.int64).sum(axis=2)).astype(np.int32)


def conv_weight_matrix(w: np.ndarray, groups: int) -> np.ndarray:
    """OIHW conv weights -> ``[groups, O/groups, KH*KW*I]``, k ordered (kh, kw, c) as the run-time
    im2col packs the activations (channels innermost: contiguous in NHWC)."""
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(groups, o // groups, kh * kw * i))
