"""The fused top-label scan of CPU logits: each row read once, in one compiled loop (numba).

Why a compiled loop. The eager torch scan (``_metrics_kernels._scan_rows``) makes seven
passes over every cache-sized block -- amax, subtract, scale, the NaN/inf witness, exp2, the
row sums, the label scores -- and measured too slow for the target of an ECE at 5x
torchmetrics (docs/performance.md). torch has no op that yields the row maximum, the sum of
exponentials and the label's score together (``softmax`` writes all N x K probabilities and
still needs an ``amax`` of them), and ``torch.compile``'s CPU backend or a C++ extension
need a C++ toolchain at run time and seconds to minutes of compilation. numba, a well-kept
JIT with wheels for every platform, compiles this module's loop once per dtype (then cached
on disk) and LLVM vectorises it, which meets that target. This module imports numba;
``_metrics_kernels`` imports it at the first scan of CPU logits, and without numba scans with
the eager torch kernels (same results to rounding) after a warning.

The loop, per chunk of rows that stays in L1/L2 cache (:func:`_scan_block`, K >= 20): each
row's maximum and its scaled differences (z_k - max) log2(e) into a work buffer; 2^x of the
whole buffer as one flat vectorised loop (so no row pays a scalar remainder for it); each
row's sum, confidence 1 / sum_k 2^x_k and correctness. For K < 20
(:func:`_scan_block_short`; CIFAR-10's K = 10) a chunk of 512 rows is copied transposed and
every step runs along the rows, vectorised across them (faster than the row kernel there:
docs/performance.md).

Correctness is exact: argmax (the first maximal class, as torch and NumPy) equals the label,
i.e. the label scores the maximum and no class before it does -- the short kernel keeps the
first maximal class as it goes, the row kernel compares the classes before the label. So
no row needs a second look (the eager scan asks argmax to confirm rows whose maximum two
classes could share).

2^x for x in [-115, 0] (the argument floored at ``EXP2_FLOOR`` as in the torch kernels):
x = r + f with r = floor(x + 1/2) and f in [-1/2, 1/2); 2^f by its Taylor polynomial
sum_n (f ln 2)^n / n!, to degree 7 for float32 (truncation < 6e-9, below float32's
rounding) and 12 for float64 (< 2e-16), in Horner form; 2^r by writing r + bias into the
exponent bits of a float (r >= -115 keeps it a normal number). Written out rather than
``np.exp2`` because numba calls libm's exp2 once per element (LLVM vectorises it only with
Intel's SVML library): a scan built on it was slower (docs/performance.md).

Every element takes the same instructions in vector and remainder loops (fused
multiply-adds allowed in both), and a row's sum depends only on K (one kernel per K), so a
row's confidence does not depend on its position or on the thread count (a batched run
scores exactly as the single run).

The NaN/inf witness: the sum of all scaled differences, finite iff the block's logits are
(a NaN makes its own difference NaN; a row maximum of +-inf makes the maximum's own
difference inf - inf = NaN; -inf below a finite maximum makes its difference -inf), unless
the sum overflows (logits beyond ~1e36), a false alarm that the exact check then clears.
The fast-math flags allow reassociation (vectorised sums), contraction and ignoring the
sign of zero, but not assuming finite values, so NaN and inf propagate as IEEE says.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.errors import NumbaWarning
from numba.extending import intrinsic

from calib_pipeline.calibration._metrics_exp2 import EXP2_FLOOR, LOG2_E

# elements of a row chunk's work buffer: 2^13 (32 KiB of float32) stays in L1/L2 cache
# between the loops; 2^12 - 2^14 measured alike (1,000,000 x 100; docs/performance.md).
CHUNK_ELEMENTS = 2**13
# Below SHORT_ROWS classes the rows are scanned transposed, vectorised across rows
# (:func:`_scan_block_short`), in chunks of SHORT_CHUNK_ROWS rows: transposed measured faster
# below K = 20, equal at 20, slower from 24; 512 rows the fastest chunk of those tried
# (docs/performance.md).
SHORT_ROWS = 20
SHORT_CHUNK_ROWS = 512
# Taylor degree of 2^f, f in [-1/2, 1/2]: the first left-out term (ln(2)/2)^(d+1)/(d+1)!
# is 5.6e-9 for float32 at degree 7 (2^-24 = 6e-8) and 1.7e-16 for float64 at degree 12
# (2^-53 = 1.1e-16)
DEGREES = {np.dtype(np.float32): 7, np.dtype(np.float64): 12}
# fast-math without 'nnan'/'ninf': NaN and inf must reach the witness
_FASTMATH = {"reassoc", "contract", "nsz"}
_OPTIONS: dict[str, Any] = {"nogil": True, "fastmath": _FASTMATH, "boundscheck": False}


def chunk_rows(n_classes: int) -> int:
    """Rows per chunk of the work buffer (at least 1)."""
    return max(1, CHUNK_ELEMENTS // n_classes)


def constants(dtype: np.dtype) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The kernel's numbers in ``dtype``: (log2 e, floor, 0, 1/2, 1) and the Taylor
    coefficients (ln 2)^n / n! of 2^f from the highest degree down (for Horner's rule)."""
    cast = np.dtype(dtype).type
    numbers = tuple(cast(v) for v in (LOG2_E, EXP2_FLOOR, 0.0, 0.5, 1.0))
    degree = DEGREES[np.dtype(dtype)]
    coefficients = tuple(
        cast(math.log(2.0) ** n / math.factorial(n)) for n in range(degree, -1, -1)
    )
    return numbers, coefficients


@intrinsic
def _power_of_two(typingctx: Any, whole: Any) -> Any:
    """2^r of an integral float r in [-126, 127] (float32) or [-1022, 1023] (float64): r plus
    the exponent bias, shifted into the exponent bits of a float of the same width."""
    if whole == types.float32:
        int_ir, float_ir, bias, shift = ir.IntType(32), ir.FloatType(), 127, 23
    elif whole == types.float64:
        int_ir, float_ir, bias, shift = ir.IntType(64), ir.DoubleType(), 1023, 52
    else:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        exponent = builder.add(builder.fptosi(args[0], int_ir), ir.Constant(int_ir, bias))
        return builder.bitcast(builder.shl(exponent, ir.Constant(int_ir, shift)), float_ir)

    return whole(whole), codegen


@numba.njit(inline="always", **_OPTIONS)
def _row_max(row):  # pragma: no cover - compiled
    # Eight running maxima over interleaved elements, then combined: LLVM does not
    # vectorise a max reduction unless it may assume no NaN, but the eight independent
    # chains run in parallel (one chain is slower: docs/performance.md).
    # max(m, v) keeps m unless v > m (as Python's), so a NaN is never selected unless it is
    # row[0]; either way its own scaled difference is NaN, which the witness sees.
    n = row.shape[0]
    m0 = row[0]
    if n < 16:  # short rows: one chain (the eight measured slower for K = 2)
        for k in range(1, n):
            m0 = max(m0, row[k])
        return m0
    m1 = m2 = m3 = m4 = m5 = m6 = m7 = m0
    whole = n - n % 8
    for k in range(0, whole, 8):
        v0, v1, v2, v3 = row[k], row[k + 1], row[k + 2], row[k + 3]
        v4, v5, v6, v7 = row[k + 4], row[k + 5], row[k + 6], row[k + 7]
        m0 = max(m0, v0)
        m1 = max(m1, v1)
        m2 = max(m2, v2)
        m3 = max(m3, v3)
        m4 = max(m4, v4)
        m5 = max(m5, v5)
        m6 = max(m6, v6)
        m7 = max(m7, v7)
    for k in range(whole, n):
        m0 = max(m0, row[k])
    m0 = max(m0, m1)
    m2 = max(m2, m3)
    m4 = max(m4, m5)
    m6 = max(m6, m7)
    m0 = max(m0, m2)
    m4 = max(m4, m6)
    return max(m0, m4)


def _scan_block(
    block, labels, confidence, correct, work, peaks, numbers, coefficients
):  # pragma: no cover - compiled
    """The kernel for rows of ``SHORT_ROWS`` classes or more: see the module docstring;
    ``numbers`` and ``coefficients`` are :func:`constants` of the block's dtype; returns the
    block's NaN/inf witness."""
    log2_e, floor, zero, half, one = numbers
    n, n_classes = block.shape
    rows = peaks.shape[0]
    witness = zero
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        for i in range(start, stop):
            row = block[i]
            peak = _row_max(row)
            peaks[i - start] = peak
            # a row view (not work[base + k]): indices from range() are known to be
            # non-negative, so numba adds no wraparound that would turn the loop into
            # gathers and scatters (slower)
            scaled = work[(i - start) * n_classes : (i - start + 1) * n_classes]
            for k in range(n_classes):
                scaled[k] = (row[k] - peak) * log2_e
        for j in range((stop - start) * n_classes):
            x = work[j]
            witness += x
            work[j] = _exp2(x, floor, half, zero, coefficients)
        for i in range(start, stop):
            powers = work[(i - start) * n_classes : (i - start + 1) * n_classes]
            mass = zero
            for k in range(n_classes):
                mass += powers[k]
            confidence[i] = one / mass
            correct[i] = _first_maximum_is(block[i], labels[i], peaks[i - start])
    return witness


@numba.njit(inline="always", **_OPTIONS)
def _exp2(x, floor, half, zero, coefficients):  # pragma: no cover - compiled
    # 2^x for x <= 0, floored at 2^floor: 2^r, r = floor(x + 1/2), times 2^f by Horner's rule
    x = max(x, floor)
    whole = np.floor(x + half)
    f = x - whole
    p = zero
    for c in coefficients:
        p = p * f + c
    return p * _power_of_two(whole)


@numba.njit(inline="always", **_OPTIONS)
def _first_maximum_is(row, label, peak):  # pragma: no cover - compiled
    # argmax (the first maximal class, as torch and NumPy) == label: the label scores the
    # maximum and no class before it does (an exact comparison, vectorised, no branch out)
    if row[label] != peak:
        return False
    ties = 0
    for k in range(label):
        ties += row[k] == peak
    return ties == 0


def _scan_block_short(
    block, labels, confidence, correct, columns, peaks, mass, first, numbers, coefficients
):  # pragma: no cover - compiled
    """The kernel for rows of fewer than ``SHORT_ROWS`` classes, vectorised across rows: a
    chunk of rows is copied transposed into ``columns`` (K x rows), then the running
    maximum and its first class, the scaled differences, 2^x and the sums run along the
    rows, a column at a time. The same arithmetic per element as :func:`_scan_block`; the
    K terms of a row are added in order rather than in vector lanes (a given K always takes
    the same kernel). Returns the block's NaN/inf witness."""
    log2_e, floor, zero, half, one = numbers
    n, n_classes = block.shape
    rows = peaks.shape[0]
    witness = zero
    for start in range(0, n, rows):
        size = min(rows, n - start)
        for r in range(size):
            row = block[start + r]
            for k in range(n_classes):
                columns[k, r] = row[k]
        column = columns[0]
        for r in range(size):
            peaks[r] = column[r]
            first[r] = 0
        for k in range(1, n_classes):
            column = columns[k]
            for r in range(size):
                above = column[r] > peaks[r]
                peaks[r] = column[r] if above else peaks[r]
                first[r] = k if above else first[r]
        for r in range(size):
            mass[r] = zero
        for k in range(n_classes):
            column = columns[k]
            for r in range(size):
                x = (column[r] - peaks[r]) * log2_e
                witness += x
                mass[r] += _exp2(x, floor, half, zero, coefficients)
        for r in range(size):
            confidence[start + r] = one / mass[r]
            correct[start + r] = first[r] == labels[start + r]
    return witness


def _compile(kernel: Any) -> Any:
    try:
        return numba.njit(cache=True, **_OPTIONS)(kernel)
    except RuntimeError as error:  # numba finds no writable cache folder for this file
        warnings.warn(
            f"the metrics kernel compiles in every process ({error}); set NUMBA_CACHE_DIR to"
            " a writable folder to keep it",
            NumbaWarning,
            stacklevel=2,
        )
        return numba.njit(cache=False, **_OPTIONS)(kernel)


scan_block = _compile(_scan_block)
scan_block_short = _compile(_scan_block_short)
