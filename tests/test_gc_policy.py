"""transforms/gc_policy.py: the heavy imports run with the cyclic collector paused and end
frozen; a command or a job leaves nothing frozen behind, however it ends."""
from __future__ import annotations

import gc
import sys

import pytest

from runners import cli
from transforms.gc_policy import collector_paused, freeze_alive, long_lived_imports, thawed_after
from transforms.offline import isolation


@pytest.fixture(autouse=True)
def _nothing_frozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_imports_run_without_the_collector_and_end_frozen_with_it_back_on():
    assert gc.isenabled()
    with long_lived_imports():
        assert not gc.isenabled()
        made = [[] for _ in range(10)]
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert made  # alive, so frozen


def test_a_collector_that_was_off_stays_off_and_a_failed_import_still_freezes():
    gc.disable()
    try:
        with pytest.raises(ImportError), long_lived_imports():
            import pixelmill_no_such_module  # noqa: F401
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.enable()


def test_a_paused_collector_freezes_nothing_and_comes_back_on():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_thawed_after_unfreezes_when_the_body_raises():
    with pytest.raises(RuntimeError), thawed_after():
        gc.freeze()
        raise RuntimeError("the run failed")
    assert gc.get_freeze_count() == 0


def test_a_command_that_stops_at_a_usage_error_leaves_nothing_frozen(tmp_path, capsys):
    code = cli.main(["preprocess", "--data_root", str(tmp_path), "--output_dir",
                     str(tmp_path / "out"), "--lables", "x.csv"])
    assert code == cli.EXIT_USAGE and "--lables" in capsys.readouterr().err
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def test_the_decoders_forkserver_imports_tensorflow_and_the_inspection_frozen():
    assert isolation.DECODER_PRELOAD == ("transforms.offline.decoder_imports",)
    sys.modules.pop("transforms.offline.decoder_imports", None)
    import transforms.offline.decoder_imports  # noqa: F401
    assert gc.get_freeze_count() > 0 and gc.isenabled()
    assert {"tensorflow", "transforms.offline.image_inspection"} <= set(sys.modules)


def test_a_callers_freeze_is_left_as_it_was_and_the_job_freezes_nothing_over_it():
    """A library user froze objects before the run (a pre-fork server): Python can only
    unfreeze everything, so the run neither freezes nor unfreezes."""
    kept = [[] for _ in range(100)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    with thawed_after():
        with long_lived_imports():
            made = [[] for _ in range(100)]
        freeze_alive()
        assert gc.get_freeze_count() <= frozen  # nothing added (freed objects leave it)
    assert gc.get_freeze_count() <= frozen
    objects = gc.get_objects()  # every tracked object the collector walks: none frozen
    assert not any(obj is kept for obj in objects) and any(obj is made for obj in objects)


def test_inside_our_own_thawed_after_a_nested_one_still_freezes_and_all_is_thawed():
    """`pixelmill preprocess` nests them: the command's (Beam's import frozen) around the job's
    (the graph frozen)."""
    with thawed_after():
        with long_lived_imports():
            first = [[] for _ in range(100)]
        outer = gc.get_freeze_count()
        assert outer > 0
        with thawed_after():
            second = [[] for _ in range(100)]
            freeze_alive()
            assert gc.get_freeze_count() > outer
    assert gc.get_freeze_count() == 0
    assert first and second
