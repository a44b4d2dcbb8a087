"""The class table: ids never change across runs; frozen tables; explicit renames."""
from __future__ import annotations

import pytest

from runners import cli
from tests.beamutil import assert_that, beam_pipeline
from tests.imageutil import write_photo
from tests.jobutil import copy_output, index_rows, run_job
from transforms.offline import classes


def test_parse_rejects_a_name_listed_twice():
    with pytest.raises(ValueError, match="lists 'cat' twice"):
        classes.parse_class_table("cat\ndog\ncat\n", "classes.txt")


def test_parse_ignores_blank_lines_and_whitespace():
    assert classes.parse_class_table(" cat \n\ndog\n", "x") == ["cat", "dog"]


def test_new_names_are_appended_sorted_after_existing_ids():
    assert classes.extend_class_table(["zebra", "cat"], ["dog", "cat", "ant"], frozen=False) == [
        "zebra", "cat", "ant", "dog"]


def test_frozen_table_takes_no_new_names():
    assert classes.extend_class_table(["cat"], ["dog"], frozen=True) == ["cat"]


def test_rename_keeps_the_id():
    assert classes.apply_renames(["cat", "dog"], {"dog": "canine"}) == ["cat", "canine"]


def test_rename_onto_an_existing_name_is_an_error():
    with pytest.raises(ValueError, match="ids cannot be merged"):
        classes.apply_renames(["cat", "dog"], {"dog": "cat"})


DOGS = ("dog/0.jpg", "dog/2.jpg", "dog/4.jpg")  # in conftest's folder corpus


@pytest.fixture()
def first_run(folder_snapshot, folder_images, tmp_path):
    """(images, out): a fresh folder corpus and a copy of the job's output on it (conftest
    `folder_snapshot`: classes.txt is cat, dog), for a second run on top."""
    copy_output(folder_snapshot.out, tmp_path / "out")
    return folder_images, tmp_path / "out"


def _write_ant(images, index: int) -> None:
    write_photo(images / "ant" / f"{index}.jpg", 30 + index, 64, 80, class_index=2, quality=90)


def test_ids_survive_a_rerun_with_new_classes(first_run):
    folders, out = first_run
    assert (out / "classes.txt").read_text().split() == ["cat", "dog"]
    for i in range(3):
        _write_ant(folders, i)
    second = run_job(folders, out)
    assert (out / "classes.txt").read_text().split() == ["cat", "dog", "ant"]  # ant is new: last
    rows = index_rows(second)
    assert {rows[path]["label_id"] for path in DOGS} == {1}
    assert {rows[f"ant/{i}.jpg"]["label_id"] for i in range(3)} == {2}


def test_frozen_mode_rejects_new_classes(first_run):
    folders, out = first_run
    _write_ant(folders, 0)
    second = run_job(folders, out, sets=["classes.frozen=true"])
    assert index_rows(second)["ant/0.jpg"]["reason"] == "unknown_class"
    assert (out / "classes.txt").read_text().split() == ["cat", "dog"]


def test_rename_from_the_config_keeps_the_id(first_run):
    folders, out = first_run
    second = run_job(folders, out, sets=["classes.renames={dog: canine}"])
    assert (out / "classes.txt").read_text().split() == ["cat", "canine"]
    rows = index_rows(second)
    assert {(rows[path]["label"], rows[path]["label_id"]) for path in DOGS} == {("canine", 1)}


def test_classes_file_that_reorders_existing_ids_is_refused(first_run, tmp_path, capsys):
    folders, out = first_run
    reordered = tmp_path / "classes.txt"
    reordered.write_text("dog\ncat\n")
    code = cli.main(["preprocess", "--data_root", str(folders), "--output_dir", str(out),
                     "--classes", str(reordered)])
    assert code == 2
    assert "class ids never change" in capsys.readouterr().err


def test_class_ids_come_from_one_lookup_per_table_not_one_per_record():
    from transforms.offline.classes import AssignClassIdFn as _AssignClassIdFn
    from transforms.offline.image_record import ImageRecord
    table = [f"class_{i}" for i in range(20_000)]
    fn = _AssignClassIdFn()
    [first] = fn.process(ImageRecord(uri="u", path="a.jpg", file_bytes=1, label="class_19999"),
                         table)
    lookup = fn._ids
    [second] = fn.process(ImageRecord(uri="u", path="b.jpg", file_bytes=1, label="class_7",
                                      boxes=((0.1, 0.1, 0.2, 0.2, "nope"),)), table)
    [third] = fn.process(ImageRecord(uri="u", path="c.jpg", file_bytes=1, label="dog"), table)
    assert fn._ids is lookup  # built once for the table
    assert first.label_id == 19999
    assert (second.reject.reason, second.reject.detail) == (
        "bad_box", "box classes ['nope'] are not in the class table")
    assert third.reject.reason == "unknown_class" and "(20000 classes: class_0," in \
        third.reject.detail


def test_the_table_side_input_is_sized_for_beams_cache_without_walking_its_names():
    """Beam's side-input cache sizes what it holds by walking it (`objsize`); the table's
    names weigh what they weigh, but the walk stops at one number (`CacheAware`)."""
    import pickle
    import sys

    import apache_beam as beam
    from apache_beam.coders import coders
    from apache_beam.runners.worker import statecache

    names = [f"class_{i:05d}" for i in range(5000)]
    table = classes.ClassNames(names)
    assert table == names
    for copy in (pickle.loads(pickle.dumps(table)),
                 coders.FastPrimitivesCoder().decode(coders.FastPrimitivesCoder().encode(table))):
        assert type(copy) is classes.ClassNames and copy == names
    walked = []
    real = statecache._get_referents_func
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(statecache, "_get_referents_func",
                      lambda *objs: walked.extend(objs) or real(*objs))
        size = statecache.get_deep_size([table])
    assert len(walked) < 10  # the list, the table, its weight: not 5,000 names
    assert size >= sys.getsizeof(table) + sum(map(sys.getsizeof, names))

    def is_class_names(tables):
        assert [type(t) for t in tables] == [classes.ClassNames] and tables[0] == ["a", "b"]

    with beam_pipeline() as pipeline:
        labelled = pipeline | beam.Create([_labelled("b"), _labelled("a")])
        assert_that(labelled | classes.ClassTable([], frozen=False), is_class_names)


@pytest.mark.parametrize("few_bundles", [False, True])
def test_the_table_extends_with_the_sorted_new_names_once_each(few_bundles):
    import apache_beam as beam

    def is_extended(tables):
        assert tables == [["c", "a", "b"]]

    with beam_pipeline() as pipeline:
        labelled = (pipeline
                    | beam.Create([_labelled("b"), _labelled("c"), _labelled("a"),
                                   _labelled("b")])
                    | beam.Reshuffle())  # bundles of their own, as after the job's shuffles
        assert_that(labelled | classes.ClassTable(["c"], frozen=False, few_bundles=few_bundles),
                    is_extended)


def _labelled(label: str):
    from transforms.offline.image_record import ImageRecord
    return ImageRecord(uri="u", path=f"{label}.jpg", file_bytes=1, label=label)


def test_a_class_name_is_refused_for_exactly_the_forbidden_characters():
    # Every code point, inside a name: refused exactly when its category is forbidden (the
    # printable fast path must agree with the per-character check everywhere).
    import unicodedata

    from transforms.offline.class_names import _FORBIDDEN_CATEGORIES, class_name_problem
    wrong = [hex(point) for point in range(0x110000)
             if (class_name_problem(f"a{chr(point)}b") is None)
             == (unicodedata.category(chr(point)) in _FORBIDDEN_CATEGORIES)]
    assert wrong == []


@pytest.mark.parametrize("bad", [None, 7, "", " cat", "cat\t", "ze\x1cbra", "a\u2028b",
                                 "\ud800x", "new\nline"])
def test_a_table_is_checked_at_once_with_what_the_name_by_name_check_says(bad):
    from transforms.offline.class_names import class_name_problem, first_class_name_problem
    # Not printable and allowed (a no-break space, a zero-width space, a soft hyphen): the
    # table's quick pass falls back and still finds nothing.
    good = ["cat", "dog", "no\u00a0break", "zero\u200bwidth", "soft\u00adhyphen", "é 漢字 😀"]
    assert first_class_name_problem(good) is None
    assert first_class_name_problem(tuple(good[:2])) is None
    assert first_class_name_problem([]) is None
    names = [*good[:3], bad, *good[3:], bad]
    assert first_class_name_problem(names) == (3, class_name_problem(bad))
    with pytest.raises(ValueError) as refused:
        classes.class_table_bytes("t.txt", names)
    assert str(refused.value) == f"Class table t.txt: id 3 {class_name_problem(bad)}"


def test_the_table_file_is_each_name_then_a_newline_and_a_repeat_is_refused():
    assert classes.class_table_bytes("t", ["cat", "no\u00a0break", "é"]) == (
        "cat\nno\u00a0break\né\n".encode())
    assert classes.class_table_bytes("t", []) == b""
    with pytest.raises(ValueError, match="lists 'dog' twice"):
        classes.class_table_bytes("t", ["dog", "cat", "dog", "cat"])
