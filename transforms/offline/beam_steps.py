"""Beam steps whose introspection costs little: `LeanDoFn`, and `Map`, `FlatMap` and `Filter`
built on it with `beam.Map`'s, `beam.FlatMap`'s and `beam.Filter`'s semantics and labels.

Beam looks for state and timer parameters in every method `dir()` lists of a DoFn
(`userstate.get_dofn_specs`, an `inspect.signature` per method), about 8 times per ParDo per
run: when it is applied, translated, and set up for each bundle. A DoFn lists ~30 methods, all
but a few of them `beam.DoFn`'s own, which declare no such parameter; that was a third of a
small job's CPU. A `LeanDoFn` lists only what its own classes define (and its instance
attributes), so Beam inspects just the methods that can declare one. `beam.Map` and friends
wrap their callable in Beam's DoFn, which lists them all; these wrap it in a LeanDoFn. A
callable that asks for DoFn parameters (a `beam.DoFn.TimestampParam` default) is refused:
Beam's Map fills those in, these would not.
"""
from __future__ import annotations

import functools
import inspect

import apache_beam as beam
from apache_beam.transforms import ptransform

__all__ = ["LeanDoFn", "Map", "FlatMap", "Filter"]


@functools.cache
def _own_names(cls: type) -> tuple[str, ...]:
    """The attribute names `cls` and its bases below LeanDoFn define, less the special ones
    (`__init__`: Python calls those, Beam passes them no parameter)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is LeanDoFn:
            break
        names.update(name for name in vars(klass) if not name.startswith("__"))
    return tuple(sorted(names))


class LeanDoFn(beam.DoFn):
    """A DoFn whose `dir()` lists the names its own classes define (special names aside) and
    its instance's, not those it inherits from `beam.DoFn` (see the module's docstring)."""

    def __dir__(self):
        return sorted({*_own_names(type(self)), *vars(self)})


class _Call(LeanDoFn):
    """Holds the step's callable; a subclass turns its result into the step's outputs."""

    def __init__(self, fn):
        super().__init__()
        self._fn = fn


class _MapFn(_Call):
    def process(self, element, *args, **kwargs):
        return (self._fn(element, *args, **kwargs),)


class _FlatMapFn(_Call):
    def process(self, element, *args, **kwargs):
        return self._fn(element, *args, **kwargs)


class _FilterFn(_Call):
    def process(self, element, *args, **kwargs):
        return (element,) if self._fn(element, *args, **kwargs) else ()


_DOFN_PARAM = type(beam.DoFn.TimestampParam)  # the class of every DoFn.*Param


def _asks_for_dofn_params(fn) -> bool:
    """Whether `fn` declares a DoFn parameter (a default such as `beam.DoFn.TimestampParam`),
    which Beam's own Map fills in and these steps would pass on as it is."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature declares none
        return False
    return any(isinstance(parameter.default, _DOFN_PARAM) for parameter in parameters)


def _step(kind: str, dofn_class, fn, args, kwargs) -> beam.ParDo:
    if not callable(fn):
        raise TypeError(f"{kind} needs a callable, got {fn!r}")
    if _asks_for_dofn_params(fn):
        raise TypeError(f"{kind}: {fn!r} asks for a DoFn parameter (timestamp, window, "
                        f"state...); use beam.{kind}, which fills them in")
    pardo = beam.ParDo(dofn_class(fn), *args, **kwargs)
    pardo.label = f"{kind}({ptransform.label_from_callable(fn)})"
    return pardo


def Map(fn, *args, **kwargs) -> beam.ParDo:  # noqa: N802 (named as beam.Map)
    """`beam.Map`: one output, `fn(element, *args, **kwargs)`, per element."""
    return _step("Map", _MapFn, fn, args, kwargs)


def FlatMap(fn, *args, **kwargs) -> beam.ParDo:  # noqa: N802 (named as beam.FlatMap)
    """`beam.FlatMap`: every item of the iterable `fn(element, *args, **kwargs)` returns."""
    return _step("FlatMap", _FlatMapFn, fn, args, kwargs)


def Filter(fn, *args, **kwargs) -> beam.ParDo:  # noqa: N802 (named as beam.Filter)
    """`beam.Filter`: the elements for which `fn(element, *args, **kwargs)` is true."""
    return _step("Filter", _FilterFn, fn, args, kwargs)
