"""Beam's construction caches (`runners.construction_caches`) give the answers Beam gives."""
from __future__ import annotations

import functools
import inspect

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, userstate
from apache_beam.transforms.core import CallableWrapperDoFn
from apache_beam.transforms.userstate import BagStateSpec

from runners import construction_caches

COUNT = BagStateSpec("count", VarIntCoder())


class Stateful(beam.DoFn):
    def process(self, item, count=beam.DoFn.StateParam(COUNT)):
        yield item


class Plain(beam.DoFn):
    def __init__(self, factor):
        self.factor = factor

    def process(self, item):
        yield item * self.factor


class HoldsAMethod(beam.DoFn):
    def __init__(self, other):
        self.helper = other.process

    def process(self, item):
        yield item


def test_class_based_dofns_share_one_answer_and_keep_their_state_specs():
    construction_caches.install()
    assert userstate.get_dofn_specs(Stateful()) == ({COUNT}, set())
    assert userstate.get_dofn_specs(Stateful()) == ({COUNT}, set())
    assert userstate.get_dofn_specs(Plain(2)) == (set(), set())
    assert construction_caches._class_key(Plain(3)) is Plain


def test_dofns_holding_callables_are_answered_per_object():
    construction_caches.install()
    holder = HoldsAMethod(Stateful())
    assert construction_caches._class_key(holder) is None
    assert userstate.get_dofn_specs(holder) == ({COUNT}, set())  # the held method's state
    assert userstate.get_dofn_specs(CallableWrapperDoFn(lambda x: x)) == (set(), set())


def test_a_pipeline_with_a_stateful_step_runs_with_the_caches():
    construction_caches.install()
    with beam.Pipeline() as pipeline:
        out = (pipeline | beam.Create([("a", 1), ("a", 2), ("b", 3)])
               | beam.ParDo(Stateful()) | beam.Map(lambda kv: kv[1]))
        assert_that(out, equal_to([1, 2, 3]))


def test_a_map_of_a_plain_function_is_answered_per_class_and_of_a_bound_method_per_object():
    construction_caches.install()
    assert construction_caches._class_key(CallableWrapperDoFn(lambda x: x)) is CallableWrapperDoFn
    assert construction_caches._class_key(CallableWrapperDoFn(Stateful().process)) is None
    assert userstate.get_dofn_specs(CallableWrapperDoFn(Stateful().process)) == ({COUNT}, set())


class WithProperty(beam.DoFn):
    @property
    def helper(self):
        return self.process

    def process(self, item):
        yield item


def test_a_dofn_with_its_own_property_is_answered_per_object():
    assert construction_caches._class_key(WithProperty()) is None


def _plain_answer(f):
    """Beam's own `get_function_args_defaults`, uncached."""
    from apache_beam.typehints.decorators import get_signature
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = [p for p in get_signature(f).parameters.values() if p.kind in kinds]
    return ([p.name for p in parameters],
            [p.default for p in parameters if p.default is not p.empty])


def scale(item, factor=2, *rest, side=beam.DoFn.SideInputParam):
    return item * factor


class Callable:
    def __call__(self, item, factor=4):
        return item * factor


def test_function_arguments_are_beams_for_functions_methods_and_other_callables():
    construction_caches.install()
    dofn = Stateful()
    callables = [scale, dofn.process, Stateful.process, Stateful().process,
                 functools.partial(scale, factor=3), Callable(), lambda x, y=1: x]
    for f in callables * 2:  # the second round is answered from the cache
        assert core.get_function_args_defaults(f) == _plain_answer(f), f
    assert core.get_function_args_defaults(dofn.process) == (
        ["item", "count"], list(Stateful.process.__defaults__))
    assert core.get_function_args_defaults(Stateful.process)[0] == ["self", "item", "count"]


def test_function_arguments_follow_new_defaults_and_callers_get_their_own_lists():
    construction_caches.install()

    def step(item, factor=2):
        return item * factor
    first = core.get_function_args_defaults(step)
    first[1].append("changed by a caller")
    assert core.get_function_args_defaults(step) == (["item", "factor"], [2])
    step.__defaults__ = (5,)
    assert core.get_function_args_defaults(step) == (["item", "factor"], [5])
