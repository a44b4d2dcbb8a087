"""`transforms.offline.beam_steps`: `Map`, `FlatMap` and `Filter` give what Beam's give (outputs,
side inputs, keyword arguments, multiple outputs, labels), and a `LeanDoFn` shows Beam's DoFn
introspection its own methods only, so a state parameter it declares is still found; a callable
that asks for DoFn parameters, which Beam's Map fills in, is refused."""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.testing.util import equal_to
from apache_beam.transforms import userstate

from tests.beamutil import assert_that, fn_api_pipeline
from transforms.offline import beam_steps
from transforms.offline.beam_steps import Filter, FlatMap, LeanDoFn, Map

_SEEN = userstate.ReadModifyWriteStateSpec("seen", VarIntCoder())
_SEEN_PARAM = beam.DoFn.StateParam(_SEEN)


def _scaled(x, factor, offset=0):
    return x * factor + offset


def _repeated(x, times):
    return [x] * times


def _above(x, floor):
    return x > floor


STEPS = [("Map", Map, beam.Map, _scaled, (3,), {"offset": 1}),
         ("FlatMap", FlatMap, beam.FlatMap, _repeated, (2,), {}),
         ("Filter", Filter, beam.Filter, _above, (2,), {})]


@pytest.mark.parametrize("name,ours,beams,fn,args,kwargs", STEPS, ids=[s[0] for s in STEPS])
def test_a_step_gives_what_beams_gives(name, ours, beams, fn, args, kwargs):
    with fn_api_pipeline() as pipeline:
        numbers = pipeline | beam.Create([1, 2, 3, 4])
        expected = {"Map": [4, 7, 10, 13], "FlatMap": [1, 1, 2, 2, 3, 3, 4, 4],
                    "Filter": [3, 4]}[name]
        assert_that(numbers | "Ours" >> ours(fn, *args, **kwargs), equal_to(expected),
                    label="CheckOurs")
        assert_that(numbers | "Beams" >> beams(fn, *args, **kwargs), equal_to(expected),
                    label="CheckBeams")


def test_side_inputs_reach_the_callable_as_beams_do():
    with fn_api_pipeline() as pipeline:
        numbers = pipeline | "Numbers" >> beam.Create([1, 2, 3])
        factor = pipeline | "Factor" >> beam.Create([10])
        floors = pipeline | "Floors" >> beam.Create([1, 2])
        scaled = numbers | "Scale" >> Map(_scaled, beam.pvalue.AsSingleton(factor))
        kept = numbers | "Keep" >> Filter(lambda x, fs: x > max(fs), beam.pvalue.AsList(floors))
        assert_that(scaled, equal_to([10, 20, 30]), label="CheckScaled")
        assert_that(kept, equal_to([3]), label="CheckKept")


def test_tagged_outputs_work_as_with_beams_flat_map():
    def route(x):
        yield x if x % 2 else beam.pvalue.TaggedOutput("even", x)

    with fn_api_pipeline() as pipeline:
        routed = (pipeline | beam.Create([1, 2, 3, 4])
                  | FlatMap(route).with_outputs("even", main="odd"))
        assert_that(routed.odd, equal_to([1, 3]), label="CheckOdd")
        assert_that(routed.even, equal_to([2, 4]), label="CheckEven")


@pytest.mark.parametrize("name,ours,beams,fn,args,kwargs", STEPS, ids=[s[0] for s in STEPS])
def test_an_unnamed_step_is_labelled_as_beams_is(name, ours, beams, fn, args, kwargs):
    assert ours(fn, *args).label == beams(fn, *args).label == f"{name}({fn.__name__})"


@pytest.mark.parametrize("step", [Map, FlatMap, Filter])
def test_a_step_needs_a_callable(step):
    with pytest.raises(TypeError, match="needs a callable, got 3"):
        step(3)


@pytest.mark.parametrize("step", [Map, FlatMap, Filter])
def test_a_callable_that_asks_for_dofn_parameters_is_refused(step):
    with pytest.raises(TypeError, match="asks for a DoFn parameter.*use beam"):
        step(lambda x, when=beam.DoFn.TimestampParam: x)
    with pytest.raises(TypeError, match="asks for a DoFn parameter"):
        step(lambda x, seen=_SEEN_PARAM: x)
    assert step(len).label == f"{step.__name__}(len)"  # a builtin declares none


class _Counting(LeanDoFn):
    def setup(self):
        self.ready = True

    def process(self, element):
        yield element

    def _helper(self):
        return 1


class _CountingMore(_Counting):
    def finish_bundle(self):
        return None


def test_a_lean_dofn_lists_its_own_names_and_its_instances_not_the_dofns():
    dofn = _CountingMore()
    dofn.ready = False
    names = dir(dofn)
    assert {"setup", "process", "_helper", "finish_bundle", "ready"} <= set(names)
    assert names == sorted(names)
    assert not {"start_bundle", "teardown", "default_type_hints", "get_function_arguments",
                "infer_output_type", "display_data"} & set(names)
    assert not {"start_bundle", "default_type_hints"} & set(dir(Map(_scaled, 2).fn))


class _Stateful(LeanDoFn):
    def process(self, element, seen=_SEEN_PARAM):
        yield element


class _StatefulSubclass(_Stateful):
    pass


@pytest.mark.parametrize("cls", [_Stateful, _StatefulSubclass])
def test_a_state_parameter_of_a_lean_dofn_is_still_found(cls):
    states, timers = userstate.get_dofn_specs(cls())
    assert [state.name for state in states] == ["seen"] and not timers
    assert not userstate.is_stateful_dofn(Map(_scaled, 2).fn)


def test_own_names_stop_at_the_lean_dofn_and_leave_special_names_out():
    assert not [name for name in beam_steps._own_names(_Counting) if name.startswith("__")]
    assert "__init__" not in dir(Map(_scaled, 2).fn)
    assert set(beam_steps._own_names(_CountingMore)) >= {"finish_bundle", "_helper", "process"}
