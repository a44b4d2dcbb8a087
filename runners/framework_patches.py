"""Speed-ups that patch Apache Beam's construction internals: only the `pixelmill` command
turns them on (`runners.cli.main`), never a library import or `runners.jobs.preprocess.execute`.

Beam 2.77 recomputes the same answers many times while it builds, serializes and sets up a
graph: `PipelineOptions.view_as(cls)` re-parses every flag, `userstate.get_dofn_specs(dofn)` and
`core.get_function_args_defaults(f)` take `inspect.signature` again. These answers are cached
here (per options object, per DoFn class or object, per function; keyed weakly). The patches
were written against the internals of one Beam release (`BEAM_VERSION`): with any other the
framework is left alone and one line is logged. Measurements: docs/benchmarks.md.
"""
from __future__ import annotations

import functools
import logging
import types
import weakref

__all__ = ["BEAM_VERSION", "enable", "disable", "enabled"]

BEAM_VERSION = "2.77.0"  # the release whose view_as/get_dofn_specs/args rules these copy
_LOG = logging.getLogger(__name__)
_ORIGINALS: dict = {}


def _class_key(dofn):
    """The DoFn's class when the answer of `get_dofn_specs(dofn)` depends on it alone, else
    None. Beam inspects the DoFn's attributes that are bound methods (a method's parameters
    are its argspec's, `_process_argspec_fn` for `process`). They are the class's own when the
    instance holds no bound method (a Map of a plain function holds a function, which Beam
    skips), no property could return one, and `process`, when it is a method, is inspected
    through the base `_process_argspec_fn` (a Map of a bound method is answered per object)."""
    try:
        held = vars(dofn)
    except TypeError:
        return None
    cls = type(dofn)
    if any(isinstance(value, types.MethodType) for value in held.values()) \
            or _has_properties(cls):
        return None
    if isinstance(getattr(dofn, "process", None), types.MethodType) \
            and getattr(cls, "_process_argspec_fn", None) is not _BASE_ARGSPEC_FN():
        return None
    return cls


@functools.lru_cache(maxsize=None)
def _has_properties(cls) -> bool:
    """Whether a class between `cls` and Beam's DoFn defines a property (DoFn's own return
    flags, never a method)."""
    from apache_beam.transforms.core import DoFn
    return any(isinstance(value, property) for klass in cls.__mro__
               if klass not in DoFn.__mro__ for value in vars(klass).values())


@functools.lru_cache(maxsize=1)
def _BASE_ARGSPEC_FN():
    from apache_beam.transforms.core import DoFn
    return DoFn._process_argspec_fn


def _cached_args_defaults(plain):
    """`get_function_args_defaults` answered once per function (and its defaults) and once per
    function for the methods bound to it; fresh lists each call, as Beam's are."""
    answers = weakref.WeakKeyDictionary()

    def get_function_args_defaults(f):
        function = f.__func__ if isinstance(f, types.MethodType) else f
        if not isinstance(function, types.FunctionType):
            return plain(f)
        key = (isinstance(f, types.MethodType), id(function.__defaults__))
        per_function = answers.setdefault(function, {})
        if key not in per_function:  # the defaults are kept alive, so their id is not reused
            per_function[key] = (function.__defaults__, plain(f))
        args, defaults = per_function[key][1]
        return list(args), list(defaults)

    get_function_args_defaults.__doc__ = plain.__doc__
    return get_function_args_defaults


def _cached_view_as(plain):
    views = weakref.WeakKeyDictionary()

    def view_as(self, cls):
        per_options = views.setdefault(self, {})
        view = per_options.get(cls)
        if view is None:
            view = per_options[cls] = plain(self, cls)
        return view

    view_as.__doc__ = plain.__doc__
    return view_as


def _cached_dofn_specs(plain):
    by_class, by_object = {}, weakref.WeakKeyDictionary()

    def get_dofn_specs(dofn):
        key = _class_key(dofn)
        if key is not None:
            if key not in by_class:
                by_class[key] = plain(dofn)
            return by_class[key]
        try:
            return by_object[dofn]
        except (KeyError, TypeError):  # TypeError: not weakly referenceable
            pass
        found = plain(dofn)
        try:
            by_object[dofn] = found
        except TypeError:
            pass
        return found

    get_dofn_specs.__doc__ = plain.__doc__
    return get_dofn_specs


def enabled() -> bool:
    """Whether the patches are installed in this process."""
    return bool(_ORIGINALS)


def enable() -> bool:
    """Installs the caches when the installed Beam is `BEAM_VERSION` (idempotent); otherwise
    logs one line and changes nothing. Returns whether they are installed."""
    if _ORIGINALS:
        return True
    import apache_beam
    if apache_beam.__version__ != BEAM_VERSION:
        _LOG.info("framework patches off: written for apache-beam %s, found %s",
                  BEAM_VERSION, apache_beam.__version__)
        return False
    from apache_beam.options import pipeline_options
    from apache_beam.transforms import core, userstate
    options_class = pipeline_options.PipelineOptions
    _ORIGINALS.update(view_as=options_class.view_as, get_dofn_specs=userstate.get_dofn_specs,
                      get_function_args_defaults=core.get_function_args_defaults)
    options_class.view_as = _cached_view_as(_ORIGINALS["view_as"])
    userstate.get_dofn_specs = _cached_dofn_specs(_ORIGINALS["get_dofn_specs"])
    core.get_function_args_defaults = _cached_args_defaults(
        _ORIGINALS["get_function_args_defaults"])
    return True


def disable() -> None:
    """Puts Beam's own functions back (for tests that compare both)."""
    if not _ORIGINALS:
        return
    from apache_beam.options import pipeline_options
    from apache_beam.transforms import core, userstate
    pipeline_options.PipelineOptions.view_as = _ORIGINALS.pop("view_as")
    userstate.get_dofn_specs = _ORIGINALS.pop("get_dofn_specs")
    core.get_function_args_defaults = _ORIGINALS.pop("get_function_args_defaults")
