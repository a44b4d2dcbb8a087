"""Exact sums of many doubles at once, for the statistics combiners (`stats`, `feature_stats`).

A finite nonzero double is an odd integer times a power of two. `exponent_groups` splits an
array of doubles that way in NumPy and groups the integers by exponent, so a combiner adds each
group's integers (and their squares) as Python ints, exactly, in a few C-level calls instead
of one `as_integer_ratio` per value. Any exact method gives the same sum, so the statistics do
not change a bit.
"""
from __future__ import annotations

import fractions
import operator

import numpy as np

__all__ = ["ExactSum", "add_exactly", "exponent_groups", "sum_of_squares", "first_extremes"]

_MANTISSA_BITS = 53


class ExactSum:
    """An exact sum of doubles, the same in any order, so mean and std_dev do not depend on how
    a runner splits and merges the work. A double is n / 2**k (`as_integer_ratio`); integer
    numerators are added per k, and only the final value is rounded."""

    def __init__(self):
        self.by_scale: dict = {}

    def add(self, numerator: int, scale: int) -> None:
        self.by_scale[scale] = self.by_scale.get(scale, 0) + numerator

    def add_float(self, value: float) -> None:
        """Adds one finite number (n / 2**k, as `add_exactly` splits an array of them)."""
        numerator, denominator = float(value).as_integer_ratio()
        self.add(numerator, denominator.bit_length() - 1)

    def merge(self, other: "ExactSum") -> None:
        for scale, numerator in other.by_scale.items():
            self.add(numerator, scale)

    def value(self) -> fractions.Fraction:
        return sum((fractions.Fraction(n, 1 << k) for k, n in self.by_scale.items()),
                   fractions.Fraction(0))


def add_exactly(sums: ExactSum, squares: ExactSum, numbers: np.ndarray) -> None:
    """Adds the finite float64 `numbers` to `sums` and their squares to `squares`: the same
    dicts as adding each number's `as_integer_ratio` n / 2**k one by one (n at k, n * n at
    2k; an integer at k = 0), with a C-level sum per exponent."""
    by_scale, squares_by_scale = sums.by_scale, squares.by_scale
    if len(numbers) > np.count_nonzero(numbers):  # a zero is 0 / 2**0
        by_scale[0], squares_by_scale[0] = by_scale.get(0, 0), squares_by_scale.get(0, 0)
    for exponent, numerators, _ in exponent_groups(numbers):
        total, total_squares = sum(numerators), sum_of_squares(numerators)
        if exponent >= 0:  # an integer: numerator * 2**exponent over 2**0
            scale, total, total_squares = 0, total << exponent, total_squares << 2 * exponent
        else:
            scale = -exponent
        by_scale[scale] = by_scale.get(scale, 0) + total
        squares_by_scale[2 * scale] = squares_by_scale.get(2 * scale, 0) + total_squares


def exponent_groups(numbers: np.ndarray) -> list[tuple[int, list, np.ndarray]]:
    """[(exponent, numerators, positions), ...], one per exponent in increasing order, of the
    finite float64 `numbers`: numbers[positions[i]] == numerators[i] * 2**exponent exactly,
    numerators odd Python ints, positions increasing. Zeros are left out."""
    positions = np.flatnonzero(numbers)
    mantissas, exponents = np.frexp(numbers[positions])
    numerators = np.ldexp(mantissas, _MANTISSA_BITS).astype(np.int64)  # |m| < 1: 53 bits
    lowest_bit = numerators & -numerators
    trailing_zeros = np.frexp(lowest_bit.astype(np.float64))[1] - 1
    numerators >>= trailing_zeros
    exponents = exponents.astype(np.int64) - _MANTISSA_BITS + trailing_zeros
    order = np.argsort(exponents, kind="stable")
    exponents, numerators, positions = exponents[order], numerators[order], positions[order]
    starts = [0, *(np.flatnonzero(np.diff(exponents)) + 1).tolist(), len(exponents)]
    numerators = numerators.tolist()
    return [(int(exponents[start]), numerators[start:end], positions[start:end])
            for start, end in zip(starts, starts[1:]) if end > start]


def sum_of_squares(integers: list) -> int:
    return sum(map(operator.mul, integers, integers))


def first_extremes(values: list, numbers: np.ndarray) -> tuple:
    """(smallest, largest) of `values` as Python's min and max give them (the first of equal
    ones: 0.0 or -0.0 as it came first); numbers: values as float64, none NaN, not empty."""
    extremes = []
    for position in (int(np.argmin(numbers)), int(np.argmax(numbers))):
        if numbers[position] == 0:  # argmin/argmax may pick -0.0 over an earlier 0.0
            position = int(np.flatnonzero(numbers == 0)[0])
        extremes.append(values[position])
    return tuple(extremes)
