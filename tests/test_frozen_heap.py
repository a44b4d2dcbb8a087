"""runners/frozen_heap.py: what is alive when a job starts is frozen for the run (full garbage
collections skip it) and unfrozen afterwards; a process that froze objects itself keeps them."""
from __future__ import annotations

import gc

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from runners import preprocess
from runners.frozen_heap import frozen_heap


_RAN: list = []  # freeze counts seen by the stand-in graph's element, in this process


def _record_freeze_count(element):
    _RAN.append(gc.get_freeze_count())
    return element


@pytest.fixture()
def nothing_frozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_alive_before_are_frozen_inside_and_unfrozen_after(nothing_frozen):
    before = [object(), {"a": [1]}]
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        assert not any(item is before[1] for item in gc.get_objects())
        made_inside = {"b": [2]}
        assert any(item is made_inside for item in gc.get_objects())
    assert gc.get_freeze_count() == 0
    assert any(item is before[1] for item in gc.get_objects())


def test_garbage_made_inside_is_collected_inside(nothing_frozen):
    with frozen_heap():
        cycle = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1


def test_an_error_inside_still_unfreezes(nothing_frozen):
    with pytest.raises(RuntimeError, match="boom"):
        with frozen_heap():
            raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_keeps_them_frozen(nothing_frozen):
    """(Counts are not compared: a frozen object freed meanwhile leaves the count.)"""
    before = {"frozen by the process": [1]}
    gc.freeze()
    with frozen_heap():
        made_inside = {"b": [2]}
    assert any(item is made_inside for item in gc.get_objects())  # not frozen by the block
    assert gc.get_freeze_count() > 0
    assert not any(item is before for item in gc.get_objects())  # still frozen after it


def test_the_job_is_built_and_run_with_the_heap_frozen(nothing_frozen, monkeypatch):
    """`preprocess.execute` with the job's graph replaced by a one-element stand-in: the graph
    is built and its element processed while frozen; nothing stays frozen afterwards."""
    import pipelines.preprocess
    seen = {}

    def build(pipeline, job):
        seen["built"] = gc.get_freeze_count()
        _ = pipeline | beam.Create([1]) | beam.Map(_record_freeze_count)

    monkeypatch.setattr(preprocess, "prepare_job", lambda job, options: job)
    monkeypatch.setattr(pipelines.preprocess, "build_preprocess", build)
    _RAN.clear()
    preprocess.execute(None, PipelineOptions([]))
    assert seen["built"] > 0 and len(_RAN) == 1 and _RAN[0] > 0
    assert gc.get_freeze_count() == 0
