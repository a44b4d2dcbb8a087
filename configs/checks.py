"""The basic checks every config section uses, and the error they raise.

Kept apart from the sections (`configs/schema.py`, `configs/online.py`) so that both import it
and neither imports the other. Every error names the full key, what is allowed and what was
received, in the Keras style:

    ConfigError: Value out of range for split.train. Expected a number in [0.0, 1.0].
    Received: split.train=1.5
"""
from __future__ import annotations

import collections.abc
import math
import types
import typing
from typing import Any, Mapping

__all__ = [
    "ConfigError",
    "check_one_of",
    "check_range",
    "check_pair",
    "check_probability",
    "type_ok",
]


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""


def check_one_of(key: str, value: Any, allowed: tuple) -> None:
    """`value` must be one of `allowed` (compared with ==)."""
    if value not in allowed:
        raise ConfigError(
            f"Unknown {key.rsplit('.', 1)[-1]} {value!r}. Expected one of {allowed}. "
            f"Received: {key}={value!r}")


def check_range(key: str, value: float, low: float | None = None, high: float | None = None,
                low_open: bool = False) -> None:
    """`value` must be a finite number in [low, high] (or (low, high] with `low_open`); a None
    bound is open-ended. NaN compares false with everything, so without the finiteness check
    `split.train=.nan` passed and a NaN quality threshold silently switched its rule off; an
    infinite `decode.timeout_s` made every decode fail."""
    non_finite = isinstance(value, float) and not math.isfinite(value)  # ints are finite
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if non_finite or too_low or too_high:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        bracket = "(" if low_open else "["
        raise ConfigError(
            f"Value out of range for {key}. Expected a {'finite ' if non_finite else ''}number "
            f"in {bracket}{lo}, {hi}]. Received: {key}={value!r}")


def check_pair(key: str, value, low: float | None = None, high: float | None = None,
               low_open: bool = False) -> tuple:
    """Validates a `[low, high]` range of numbers (each in the bounds) and returns it as a
    tuple of floats."""
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)):
        raise ConfigError(
            f"{key} must be a pair [low, high] of numbers. Received: {key}={value!r}")
    first, second = float(value[0]), float(value[1])
    if first > second:
        raise ConfigError(
            f"{key} must have low <= high. Received: {key}={list(value)!r}")
    check_range(f"{key}[0]", first, low, high, low_open=low_open)
    check_range(f"{key}[1]", second, low, high, low_open=low_open)
    return (first, second)


def check_probability(key: str, value: float) -> None:
    """A per-sample chance: a number in [0, 1]."""
    check_range(key, value, 0.0, 1.0)


def type_ok(value: Any, annotation: Any) -> bool:
    """Whether a YAML value fits a dataclass field's annotation (an int is a float; a bool is
    neither; a list is a tuple). Annotations it does not know are accepted: the section's own
    checks then decide."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if annotation is tuple or origin is tuple:
        return isinstance(value, (list, tuple))
    if annotation is Mapping or origin is collections.abc.Mapping:
        return isinstance(value, Mapping)
    return True
