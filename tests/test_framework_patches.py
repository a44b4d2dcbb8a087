"""`runners.framework_patches`: the CLI's Beam speed-ups give Beam's own answers, check the
Beam version, and are never installed by importing the job."""
from __future__ import annotations

import functools
import inspect
import logging
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, userstate
from apache_beam.transforms.core import CallableWrapperDoFn
from apache_beam.transforms.userstate import BagStateSpec

from runners import framework_patches

COUNT = BagStateSpec("count", VarIntCoder())


class Stateful(beam.DoFn):
    def process(self, item, count=beam.DoFn.StateParam(COUNT)):  # noqa: B008 - Beam's idiom
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


class WithProperty(beam.DoFn):
    @property
    def helper(self):
        return self.process

    def process(self, item):
        yield item


def scale(item, factor=2, *rest, side=beam.DoFn.SideInputParam):
    return item * factor


class Callable:
    def __call__(self, item, factor=4):
        return item * factor


@pytest.fixture()
def patched():
    """The patches on for one test, Beam's own functions back afterwards."""
    was_on = framework_patches.enabled()
    assert framework_patches.enable()
    yield
    if not was_on:
        framework_patches.disable()


def _dofns():
    return [Stateful(), Plain(2), HoldsAMethod(Stateful()), WithProperty(),
            CallableWrapperDoFn(lambda x: x), CallableWrapperDoFn(Stateful().process)]


def _callables():
    dofn = Stateful()
    return [scale, dofn.process, Stateful.process, Stateful().process,
            functools.partial(scale, factor=3), Callable(), lambda x, y=1: x]


def _answers():
    """What Beam answers for every DoFn, callable and options view of the cases above (twice:
    the second round comes from the caches when they are on)."""
    options = PipelineOptions(["--runner", "DirectRunner", "--direct_num_workers", "3"])
    answers = []
    for _ in range(2):
        answers += [userstate.get_dofn_specs(dofn) for dofn in _dofns()]
        answers += [core.get_function_args_defaults(f) for f in _callables()]
        answers += [options.view_as(StandardOptions).runner,
                    options.view_as(DirectOptions).direct_num_workers]
    return answers


def test_patched_answers_are_beams_own(patched):
    with_patches = _answers()
    framework_patches.disable()
    try:
        plain = _answers()
    finally:
        framework_patches.enable()
    assert with_patches == plain
    assert userstate.get_dofn_specs(HoldsAMethod(Stateful())) == ({COUNT}, set())


def test_a_view_shares_its_values_with_its_options(patched):
    options = PipelineOptions([])
    options.view_as(DirectOptions).direct_num_workers = 5
    assert options.view_as(DirectOptions).direct_num_workers == 5
    assert options.get_all_options()["direct_num_workers"] == 5


def test_function_arguments_follow_new_defaults_and_callers_get_their_own_lists(patched):
    def step(item, factor=2):
        return item * factor
    first = core.get_function_args_defaults(step)
    first[1].append("changed by a caller")
    assert core.get_function_args_defaults(step) == (["item", "factor"], [2])
    step.__defaults__ = (5,)
    assert core.get_function_args_defaults(step) == (["item", "factor"], [5])
    parameters = inspect.signature(scale).parameters
    assert core.get_function_args_defaults(scale)[0] == list(parameters)[:2]


def test_a_pipeline_with_a_stateful_step_runs_with_the_patches(patched):
    with beam.Pipeline() as pipeline:
        out = (pipeline | beam.Create([("a", 1), ("a", 2), ("b", 3)])
               | beam.ParDo(Stateful()) | beam.Map(lambda kv: kv[1]))
        assert_that(out, equal_to([1, 2, 3]))


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_another_beam_version_is_left_alone(monkeypatch):
    if framework_patches.enabled():
        framework_patches.disable()
    before = (PipelineOptions.view_as, userstate.get_dofn_specs,
              core.get_function_args_defaults)
    monkeypatch.setattr(beam, "__version__", "2.78.0")
    logger, handler = logging.getLogger(framework_patches.__name__), _Lines()
    monkeypatch.setattr(logger, "level", logging.INFO)
    logger.addHandler(handler)
    try:
        assert framework_patches.enable() is False
    finally:
        logger.removeHandler(handler)
    assert (PipelineOptions.view_as, userstate.get_dofn_specs,
            core.get_function_args_defaults) == before
    assert handler.lines == [
        f"framework patches off: written for apache-beam {framework_patches.BEAM_VERSION}, "
        "found 2.78.0"]


_UNTOUCHED = """
import apache_beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import core, userstate
before = (PipelineOptions.view_as, userstate.get_dofn_specs, core.get_function_args_defaults)
import runners.jobs.preprocess, pipelines.preprocess_graph
after = (PipelineOptions.view_as, userstate.get_dofn_specs, core.get_function_args_defaults)
print(before == after)
"""


@pytest.mark.slow
def test_importing_the_job_patches_nothing():
    done = subprocess.run([sys.executable, "-c", _UNTOUCHED], capture_output=True, text=True,
                          timeout=600, check=True)
    assert done.stdout.strip().splitlines()[-1] == "True"


def _graph_shape(tmp_path) -> list:
    """The job's pipeline proto as structure: every transform's name, URN, inputs, outputs
    with their coders (URNs, recursively) and parts. The serialized proto itself differs
    between two builds in one process (pickled payloads), so the structure is compared."""
    from pipelines.preprocess_graph import build_preprocess
    from runners.jobs import preprocess
    images = tmp_path / "img" / "cat"
    images.mkdir(parents=True, exist_ok=True)
    (images / "a.jpg").write_bytes(b"not decoded: the graph is only built")
    options, job_options, _, out = preprocess.parse_options(
        ["--data_root", str(tmp_path / "img"), "--output_dir", str(tmp_path / "out"),
         "--run_id", "r1"], "preprocess")
    job, _ = preprocess.resolve_job(job_options, f"{out}/.staging/r1")
    pipeline = beam.Pipeline(options=options)
    build_preprocess(pipeline, job)
    components = pipeline.to_runner_api().components

    def coder(coder_id):
        spec = components.coders[coder_id]
        return spec.spec.urn, tuple(coder(part) for part in spec.component_coder_ids)
    made_by = {pid: f"{t.unique_name}.{tag}" for t in components.transforms.values()
               for tag, pid in t.outputs.items()}
    return [(t.unique_name, t.spec.urn,
             sorted((tag, made_by.get(pid, "?")) for tag, pid in t.inputs.items()),
             sorted((tag, coder(components.pcollections[pid].coder_id))
                    for tag, pid in t.outputs.items()),
             sorted(components.transforms[part].unique_name for part in t.subtransforms))
            for t in sorted(components.transforms.values(), key=lambda t: t.unique_name)]


@pytest.mark.slow
def test_the_job_graph_is_the_same_with_and_without_the_patches(tmp_path):
    was_on = framework_patches.enabled()
    framework_patches.disable()
    try:
        plain = _graph_shape(tmp_path)
        assert framework_patches.enable()
        patched = _graph_shape(tmp_path)
    finally:
        if not was_on:
            framework_patches.disable()
    assert len(plain) > 300 and patched == plain  # the whole job: ~365 transforms
