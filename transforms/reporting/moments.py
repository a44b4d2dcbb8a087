"""Exact moments and fixed-bin histograms of one summarized value (`stats.SummarizeIndexFn`).

`Moments` keeps a count, exact sums (each float as an integer multiple of 2**-1074, squares of
2**-2148, so the order of inputs and merges cannot change a bit), min, max and a histogram with
fixed edges; `summary` gives the SUMMARY dict of `stats.json`.
"""
from __future__ import annotations

import bisect
import fractions
import math

import numpy as np

from transforms.reporting.exact_sums import exponent_groups, first_extremes, sum_of_squares

__all__ = ["SCALE_BITS", "EXACT_INTEGERS", "Moments", "exact_parts"]

# Exact sums: a finite double is numerator / 2**k with k <= 1074, so value * 2**1074 is an
# integer, and value**2 * 2**2148 is one too.
SCALE_BITS = 1074
SQUARE_SCALE_BITS = 2 * SCALE_BITS
EXACT_INTEGERS = 2.0 ** 53  # every int below is exactly a float64


def exact_parts(value) -> tuple[int, int]:
    """value * 2**1074 and value**2 * 2**2148 as exact integers (value: a finite int or float)."""
    numerator, denominator = value.as_integer_ratio()
    shift = SCALE_BITS - (denominator.bit_length() - 1)
    return numerator << shift, (numerator * numerator) << (2 * shift)


def _bin_index(value: float, edges: tuple) -> int:
    """The histogram bin of value; out-of-range values go to the first or last bin."""
    return min(max(bisect.bisect_right(edges, value) - 1, 0), len(edges) - 2)


class Moments:
    """Exact running count, sum, sum of squares, min, max and fixed-bin histogram of a value.
    Values come many at a time (`add_many`), or one by one (`add`)."""

    __slots__ = ("edges", "count", "zeros", "non_finite", "total", "total_squares", "minimum",
                 "maximum", "bins")

    def __init__(self, edges: tuple):
        self.edges = edges
        self.count = 0
        self.zeros = 0
        self.non_finite = 0
        self.total = 0
        self.total_squares = 0
        self.minimum = None
        self.maximum = None
        self.bins = [0] * (len(edges) - 1)

    def add(self, value) -> None:
        if not math.isfinite(value):
            self.non_finite += 1
            return
        scaled, scaled_square = exact_parts(value)
        self.count += 1
        self.zeros += value == 0
        self.total += scaled
        self.total_squares += scaled_square
        self.minimum = value if self.minimum is None else min(self.minimum, value)
        self.maximum = value if self.maximum is None else max(self.maximum, value)
        self.bins[_bin_index(value, self.edges)] += 1

    def add_many(self, values: list, numbers: np.ndarray) -> None:
        """Adds values (none None; numbers: them as float64) as `add` of each in turn would,
        with NumPy and a C-level exact sum per binary exponent (`exact_sums`)."""
        finite = np.isfinite(numbers)
        if not finite.all():
            self.non_finite += len(values) - int(np.count_nonzero(finite))
            kept = np.flatnonzero(finite).tolist()
            values, numbers = [values[i] for i in kept], numbers[finite]
        if not values:
            return
        if np.abs(numbers).max() >= EXACT_INTEGERS:  # an int may not be its float64
            for value in values:
                self.add(value)
            return
        self.count += len(values)
        self.zeros += len(values) - int(np.count_nonzero(numbers))
        for exponent, numerators, _ in exponent_groups(numbers):
            self.total += sum(numerators) << (SCALE_BITS + exponent)
            self.total_squares += sum_of_squares(numerators) << (SQUARE_SCALE_BITS
                                                                 + 2 * exponent)
        lowest, highest = first_extremes(values, numbers)
        self.minimum = lowest if self.minimum is None else min(self.minimum, lowest)
        self.maximum = highest if self.maximum is None else max(self.maximum, highest)
        bins = np.searchsorted(np.asarray(self.edges, np.float64), numbers, side="right") - 1
        counts = np.bincount(np.clip(bins, 0, len(self.bins) - 1), minlength=len(self.bins))
        self.bins = [a + b for a, b in zip(self.bins, counts.tolist())]

    def merge(self, other: "Moments") -> None:
        self.count += other.count
        self.zeros += other.zeros
        self.non_finite += other.non_finite
        self.total += other.total
        self.total_squares += other.total_squares
        for name in ("minimum", "maximum"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is None or theirs is None:
                setattr(self, name, theirs if mine is None else mine)
            else:
                setattr(self, name, min(mine, theirs) if name == "minimum" else max(mine, theirs))
        self.bins = [a + b for a, b in zip(self.bins, other.bins)]

    def summary(self) -> dict:
        """SUMMARY: count, min, max, mean, std (population), zeros, non_finite and histogram.

        min/max/mean/std are None when no finite value was seen."""
        mean = std = None
        if self.count:
            exact_mean = fractions.Fraction(self.total, self.count << SCALE_BITS)
            exact_square_mean = fractions.Fraction(self.total_squares,
                                                   self.count << SQUARE_SCALE_BITS)
            mean = float(exact_mean)
            std = math.sqrt(float(exact_square_mean - exact_mean * exact_mean))
        return {
            "count": self.count,
            "min": self.minimum,
            "max": self.maximum,
            "mean": mean,
            "std": std,
            "zeros": self.zeros,
            "non_finite": self.non_finite,
            "histogram": {"edges": list(self.edges), "counts": list(self.bins)},
        }
