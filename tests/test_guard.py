"""Guard the last good data (`runners.jobs.guard`): a run that would lose most of the live set, or
whose labels match no image, is refused (exit 4), publishes its ledger and report as a
candidate, and leaves LATEST and the live view as they were; `--accept_shrink` publishes it."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pytest

from runners import cli
from runners.errors import UsageError
from runners.jobs.guard import EXIT_REFUSED, check_max_shrink, decide, live_after
from tests.imageutil import encode, photo
from tests.jobutil import nightly_argv
from tests.tiers import slow_fixture
from transforms import snapshot_layout as layout
from transforms.live_view import live_count, live_view

# ----------------------------------------------------------------------------- the rule

@pytest.mark.parametrize("before, after, refused", [
    (0, 0, False),    # nothing to lose
    (10, 0, True),    # all of it
    (10, 5, False),   # exactly half: allowed at 0.5
    (10, 4, True),    # more than half
    (10, 12, False),  # growth
])
def test_shrink_rule(before, after, refused):
    verdict = decide(before, after, 0, 0, max_shrink=0.5)
    assert verdict.refused is refused
    assert verdict.rule == ("shrink" if refused else "")
    assert (verdict.before, verdict.after) == (before, after)


def test_to_zero_is_refused_even_with_max_shrink_one():
    assert decide(10, 0, 0, 0, max_shrink=1.0).refused
    assert not decide(10, 1, 0, 0, max_shrink=1.0).refused


def test_accept_shrink_publishes_anything():
    assert not decide(10, 0, 0, 0, accept_shrink=True).refused
    assert not decide(0, 0, 5, 0, accept_shrink=True).refused


def test_labels_matching_no_image_are_refused_even_without_live_data():
    verdict = decide(0, 0, 5, 0)
    assert verdict.refused and verdict.rule == "labels" and "5 label rows" in verdict.reason
    assert not decide(0, 3, 5, 3).refused       # some matched
    assert not decide(0, 3, 0, 0).refused       # no label rows (folder labels, empty CSV)


def test_live_after_is_accepted_for_a_base_and_live_after_for_a_night():
    accounting = {"images": {"accepted": 3}, "live": {"after": 9}}
    assert live_after(accounting, base=True) == 3
    assert live_after(accounting, base=False) == 9


@pytest.mark.parametrize("value", [0.0, -0.5, 1.5, float("nan")])
def test_max_shrink_out_of_range_names_the_flag_range_and_value(value):
    with pytest.raises(UsageError, match=r"--max_shrink must be in \(0, 1\].*Received: "
                                         r"--max_shrink"):
        check_max_shrink(value)
    assert check_max_shrink(1.0) == 1.0


def test_bad_max_shrink_exits_2_before_any_work(tmp_path, capsys):
    (tmp_path / "images").mkdir()
    code = cli.main(["preprocess", "--data_root", str(tmp_path / "images"), "--output_dir",
                     str(tmp_path / "out"), "--max_shrink", "0"])
    assert code == cli.EXIT_USAGE
    assert "--max_shrink must be in (0, 1]" in capsys.readouterr().err


def test_live_count_is_accepted_less_removed_per_live_snapshot():
    from transforms.live_view import LiveView

    def snap(run_id, accepted):
        return layout.Snapshot(run_id, f"/out/snapshots/{run_id}", manifest={
            "accounting": {"images": {"accepted": accepted}}})
    view = LiveView((snap("a", 10), snap("b", 3)),
                    {"a": {"x.jpg": "train", "y.jpg": "test"}, "b": {"z.jpg": "train"}})
    assert live_count(view) == (10 - 2) + (3 - 1)
    assert live_count(LiveView((), {})) == 0


# ----------------------------------------------------------------------------- real runs

class World:
    """Ten labelled images (five cats, five dogs), a label CSV and an output folder."""

    def __init__(self, root, base):
        self.root, self.labels, self.out = root, base / "labels.csv", base / "out"
        base.mkdir(parents=True, exist_ok=True)

    def write_labels(self, rows: dict):
        self.labels.write_text("path,label\n" + "".join(
            f"{path},{label}\n" for path, label in sorted(rows.items())))

    def argv(self, *extra) -> list[str]:
        return nightly_argv(self.root, self.labels, self.out, *extra)

    def copy(self, base) -> "World":
        other = World(self.root, base)
        shutil.copytree(self.out, other.out)
        return other


ROWS = {f"{name}/{i}.jpg": name for i in range(5) for name in ("cat", "dog")}


@slow_fixture(scope="module")
def first(tmp_path_factory):
    """A full run that accepts all ten images."""
    base = tmp_path_factory.mktemp("guard")
    root = base / "images"
    for index, (rel, label) in enumerate(sorted(ROWS.items())):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(encode(photo(50 + index, 96, 128, int(label == "dog")),
                                        "JPEG", 92))
    world = World(root, base / "first")
    world.write_labels(ROWS)
    assert cli.main(["preprocess", *world.argv("--run_id", "first")]) == 0
    return world


def _state(out) -> dict:
    return {"latest": (out / layout.LATEST).read_text(),
            "classes": (out / layout.CLASSES).read_bytes(),
            "snapshots": sorted(os.listdir(out / layout.SNAPSHOTS))}


def _refused_candidate(world, run_id: str, before: int, after: int) -> dict:
    folder = world.out / layout.CANDIDATES / run_id
    files = {os.path.relpath(os.path.join(d, f), folder)
             for d, _, names in os.walk(folder) for f in names}
    assert {layout.REJECTS, layout.REPORT, layout.INDEX, layout.STATS, layout.SUMMARY,
            layout.CANDIDATE} <= files
    assert not [f for f in files if ".tfrecord-" in f]  # the shards are not kept
    candidate = json.loads((folder / layout.CANDIDATE).read_text())
    assert (candidate["refused"]["before"], candidate["refused"]["after"]) == (before, after)
    assert candidate["refused"]["rule"] == "shrink" and candidate["run_id"] == run_id
    staging = world.out / layout.STAGING
    assert not staging.exists() or not os.listdir(staging)  # staging removed
    return candidate


def test_a_first_full_run_counts_ten_live_images(first):
    assert live_count(live_view(str(first.out))) == 10


@slow_fixture(scope="module")
def refused_full(first, tmp_path_factory):
    """A full run with a header-only labels CSV on top of the first: every image unlabeled.
    (world, the state before, the exit code, what the command wrote to stderr)."""
    world = first.copy(tmp_path_factory.mktemp("refused") / "w")
    before = _state(world.out)
    world.write_labels({})
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["preprocess", *world.argv("--run_id", "empty")])
    return world, before, code, err.getvalue()


def test_a_full_run_losing_everything_is_refused_with_exit_4(refused_full, capsys):
    world, before, code, _ = refused_full
    assert code == EXIT_REFUSED == 4
    assert _state(world.out) == before  # LATEST, classes.txt, snapshots: as they were
    candidate = _refused_candidate(world, "empty", 10, 0)
    assert candidate["accounting"]["images"]["accepted"] == 0
    rejects = (world.out / layout.CANDIDATES / "empty" / layout.REJECTS).read_text()
    assert rejects.count('"unlabeled"') == 10


def test_after_a_refusal_training_still_reads_the_first_snapshot(refused_full):
    from pipelines import training_input
    from pipelines.reader_metadata import count_examples
    world = refused_full[0]
    assert layout.latest_snapshot(str(world.out)).run_id == "first"
    assert count_examples(str(world.out), "train", "latest") == 10
    assert count_examples(str(world.out), "train", "all") == 10
    dataset = training_input.make_dataset(str(world.out), "train", batch_size=4,
                                          augment=False, shuffle=False)
    assert len(list(dataset.take(1))) == 1


def test_the_refusal_is_one_line_saying_why(refused_full):
    world, _, code, stderr = refused_full
    assert code == EXIT_REFUSED
    err = [line for line in stderr.splitlines() if "refused" in line]
    assert err == [
        f"pixelmill preprocess: refused: the live set would fall from 10 to 0 images (more "
        f"than --max_shrink 0.5); nothing published; ledger and report in "
        f"{world.out}/{layout.CANDIDATES}/empty/ (--accept_shrink publishes it)"]


def test_accept_shrink_publishes_it(first, tmp_path):
    world = first.copy(tmp_path / "w")
    world.write_labels({})
    assert cli.main(["preprocess", *world.argv("--run_id", "empty", "--accept_shrink")]) == 0
    assert (world.out / layout.LATEST).read_text().strip() == "empty"
    assert not (world.out / layout.CANDIDATES).exists()


def test_a_night_whose_images_all_become_unlabeled_is_refused(first, tmp_path):
    world = first.copy(tmp_path / "w")
    before = _state(world.out)
    world.write_labels({})
    assert cli.main(["nightly", *world.argv("--run_id", "night")]) == EXIT_REFUSED
    assert _state(world.out) == before
    _refused_candidate(world, "night", 10, 0)
    assert live_count(live_view(str(world.out))) == 10
