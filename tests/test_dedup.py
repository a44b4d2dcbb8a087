"""DropExactDuplicates and DropNearDuplicates as Beam steps: a few inline records, exact outputs."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.util import equal_to

from tests.beamutil import assert_that, fn_api_pipeline
from transforms.offline.dedup import DropExactDuplicates, DropNearDuplicates
from transforms.offline.image_record import ImageRecord


def _record(path: str, sha256: str = "", phash: str | None = None) -> ImageRecord:
    return ImageRecord(uri=f"/data/{path}", path=path, file_bytes=100, sha256=sha256,
                       phash=phash)


def test_exact_duplicates_keep_the_lowest_path_and_name_it():
    records = [_record("b/x.jpg", "aa"), _record("a/x.jpg", "aa"), _record("c/x.jpg", "aa"),
               _record("d.jpg", "bb")]
    with fn_api_pipeline() as pipeline:
        archived = pipeline | "Archive" >> beam.Create([])
        kept = (pipeline | "Tonight" >> beam.Create(records)
                | DropExactDuplicates(archived))
        assert_that(kept, equal_to([
            _record("a/x.jpg", "aa"),
            _record("b/x.jpg", "aa").rejected("duplicate", "same sha256 as 'a/x.jpg' (kept)"),
            _record("c/x.jpg", "aa").rejected("duplicate", "same sha256 as 'a/x.jpg' (kept)"),
            _record("d.jpg", "bb"),
        ]))


def test_content_accepted_in_an_earlier_snapshot_rejects_every_copy_tonight():
    records = [_record("a.jpg", "cc"), _record("b.jpg", "cc"), _record("e.jpg", "ee")]
    archive = [("cc", ("run2", "old/a.jpg")), ("cc", ("run1", "z.jpg")),
               ("dd", ("run1", "only_archived.jpg"))]
    detail = "same sha256 as 'z.jpg', accepted in snapshot run1"
    with fn_api_pipeline() as pipeline:
        archived = pipeline | "Archive" >> beam.Create(archive)
        kept = (pipeline | "Tonight" >> beam.Create(records)
                | DropExactDuplicates(archived))
        assert_that(kept, equal_to([
            _record("a.jpg", "cc").rejected("duplicate", detail),
            _record("b.jpg", "cc").rejected("duplicate", detail),
            _record("e.jpg", "ee"),
        ]))


def test_no_archive_joins_tonights_records_alone_with_the_same_answers():
    """`archive=None` (a full run) joins the records alone: the same outcomes as an empty
    archive, a quality reject with the lowest path keeping its own reason."""
    blurry = _record("a.jpg", "aa").rejected("blurry", "blur_laplacian_var=1.0 < 50")
    records = [_record("b.jpg", "aa"), blurry, _record("c.jpg", "cc")]
    expected = [blurry,
                _record("b.jpg", "aa").rejected("duplicate", "same sha256 as 'a.jpg' (kept)"),
                _record("c.jpg", "cc")]
    with fn_api_pipeline() as pipeline:
        tonight = pipeline | "Tonight" >> beam.Create(records)
        empty = pipeline | "Archive" >> beam.Create([])
        with_empty = tonight | "EmptyArchive" >> DropExactDuplicates(empty)
        alone = tonight | "NoArchive" >> DropExactDuplicates()
        assert_that(with_empty, equal_to(expected), label="WithEmpty")
        assert_that(alone, equal_to(expected), label="Alone")


def _near_detail(distance: int, who: str) -> str:
    return (f"perceptual hash {distance} bit(s) from {who} (<= dedup.max_hamming=4; the earlier "
            f"or lower path is kept)")


def _labelled(path: str, sha256: str, label: str, boxes: tuple = ()) -> ImageRecord:
    return ImageRecord(uri=f"/data/{path}", path=path, file_bytes=100, sha256=sha256,
                       label=label, boxes=boxes)


def test_with_a_class_table_ids_come_first_and_a_label_reject_takes_no_part():
    """`class_table`: each candidate of a group gets its id before the keep rule; one whose
    label (or box class) the table lacks is rejected and does not make the others duplicates,
    as when classes were assigned before the dedup. A quality reject passes without an id and
    still takes part. Without the table the same records keep the lowest path. The same with
    the shuffle in lanes."""
    table = ["cat", "dog"]
    unknown = _labelled("a.jpg", "aa", "owl")
    bad_box = _labelled("c.jpg", "cc", "cat", boxes=((0.1, 0.1, 0.5, 0.5, "owl"),))
    blurry = _labelled("e.jpg", "ee", "dog").rejected("blurry", "blur_laplacian_var=1.0 < 50")
    records = [unknown, _labelled("b.jpg", "aa", "dog"), bad_box,
               _labelled("d.jpg", "cc", "cat"), blurry, _labelled("f.jpg", "ee", "cat")]
    unknown_detail = "label 'owl' is not in the class table (2 classes: cat, dog)"
    with fn_api_pipeline() as pipeline:
        tonight = pipeline | "Tonight" >> beam.Create(records)
        classes = pipeline | "Table" >> beam.Create([table])
        for lanes in (None, 3):
            assert_that(tonight | f"WithTable{lanes}" >> DropExactDuplicates(
                class_table=classes, lanes=lanes), equal_to([
                    unknown.rejected("unknown_class", unknown_detail),
                    _labelled("b.jpg", "aa", "dog").replace(label_id=1),
                    bad_box.rejected("bad_box", "box classes ['owl'] are not in the class table"),
                    _labelled("d.jpg", "cc", "cat").replace(label_id=0),
                    blurry,
                    _labelled("f.jpg", "ee", "cat").replace(label_id=0).rejected(
                        "duplicate", "same sha256 as 'e.jpg' (kept)"),
                ]), label=f"with the table, lanes {lanes}")
            assert_that(tonight | f"NoTable{lanes}" >> DropExactDuplicates(lanes=lanes), equal_to([
                unknown,
                _labelled("b.jpg", "aa", "dog").rejected("duplicate",
                                                         "same sha256 as 'a.jpg' (kept)"),
                bad_box,
                _labelled("d.jpg", "cc", "cat").rejected("duplicate",
                                                         "same sha256 as 'c.jpg' (kept)"),
                blurry,
                _labelled("f.jpg", "ee", "cat").rejected("duplicate",
                                                         "same sha256 as 'e.jpg' (kept)"),
            ]), label=f"without, lanes {lanes}")


def test_near_duplicates_against_tonight_and_the_archive():
    records = [
        _record("a.jpg", "1", "0000000000000000"),
        _record("b.jpg", "2", "0000000000000007"),  # 3 bits from a.jpg
        _record("c.jpg", "3", "ffffffffffffffff"),  # 1 bit from an archived image
        _record("d.jpg", "4", "00000000ffffffff"),  # 32 bits from everything
        _record("e.jpg", "5", "000000000000000f"),  # 1 from b, 4 from a, 4 from the archive
    ]
    archive = [("old/c.jpg", "fffffffffffffffe", "run1"),
               ("old/e.jpg", "00000000000000ff", "run1")]  # 5 from b.jpg, 8 from a.jpg
    with fn_api_pipeline() as pipeline:
        archived = pipeline | "Archive" >> beam.Create(archive)
        tonight = pipeline | "Tonight" >> beam.Create(records)
        expected = [
            records[0],
            records[1].rejected("near_duplicate", _near_detail(3, "'a.jpg'")),
            records[2].rejected("near_duplicate", _near_detail(1, "'old/c.jpg' in snapshot run1")),
            records[3],
            # an archived neighbour outranks a closer one of tonight
            records[4].rejected("near_duplicate", _near_detail(4, "'old/e.jpg' in snapshot run1")),
        ]
        for lanes in (None, 3):  # the shuffles key by key, and in lanes
            kept = tonight | f"Near{lanes}" >> DropNearDuplicates(4, archived, lanes=lanes)
            assert_that(kept, equal_to(expected), label=f"Check{lanes}")


def test_near_duplicate_threshold_is_inclusive_and_zero_means_identical_hashes_only():
    records = [_record("a.jpg", "1", "0000000000000000"),
               _record("b.jpg", "2", "0000000000000000"),
               _record("c.jpg", "3", "0000000000000001")]
    with fn_api_pipeline() as pipeline:
        archived = pipeline | "Archive" >> beam.Create([])
        kept = (pipeline | "Tonight" >> beam.Create(records)
                | DropNearDuplicates(0, archived))
        assert_that(kept, equal_to([
            records[0],
            records[1].rejected("near_duplicate",
                                "perceptual hash 0 bit(s) from 'a.jpg' (<= dedup.max_hamming=0; "
                                "the earlier or lower path is kept)"),
            records[2],
        ]))


def test_no_archive_searches_tonights_hashes_alone_with_the_same_answers():
    """`archive=None` (a full run) skips the Flatten with the archive's hashes: the same
    verdicts as an empty archive, for the plain and the crop-tolerant search (and with the
    shuffles in lanes)."""
    records = [_record("a.jpg", "1", "0000000000000000"),
               _record("b.jpg", "2", "0000000000000007"),
               _record("c.jpg", "3", "ffffffffffffffff")]
    records = [r.replace(center_phash=r.phash) for r in records]
    expected = [records[0],
                records[1].rejected("near_duplicate", _near_detail(3, "'a.jpg'")),
                records[2]]
    for crop in (None, 4):
        with fn_api_pipeline() as pipeline:
            tonight = pipeline | "Tonight" >> beam.Create(records)
            empty = pipeline | "Archive" >> beam.Create([])
            with_empty = tonight | "EmptyArchive" >> DropNearDuplicates(
                4, empty, crop_max_hamming=crop)
            alone = tonight | "NoArchive" >> DropNearDuplicates(4, None, crop_max_hamming=crop,
                                                                lanes=3)  # and in lanes
            assert_that(with_empty, equal_to(expected), label="WithEmpty")
            assert_that(alone, equal_to(expected), label="Alone")


def test_merged_leaves_an_absent_side_out_and_flattens_several():
    """`gather.merged`: one PCollection is itself (no Flatten, which Beam's local runner
    would copy); several are one Flatten of them."""
    from transforms.offline.gather import merged
    with fn_api_pipeline() as pipeline:
        tonight = pipeline | "Tonight" >> beam.Create([1, 2])
        archive = pipeline | "Archive" >> beam.Create([3])
        assert merged([tonight, None], "Alone") is tonight
        assert_that(merged([tonight, None, archive], "Both"), equal_to([1, 2, 3]))


def _same_records(actual, expected, label: str):
    """Asserts that two PCollections hold the same records, and at least one."""
    def check(results):
        [(count, same)] = results
        assert count > 0 and same, (label, count, same)

    compared = (actual.pipeline | f"{label}Once" >> beam.Create([None])
                | f"{label}Compare" >> beam.Map(
                    lambda _, got, want: (len(got), sorted(map(repr, got)) ==
                                          sorted(map(repr, want))),
                    beam.pvalue.AsList(actual), beam.pvalue.AsList(expected)))
    assert_that(compared, check, label=f"{label}Check")


def test_routed_dedups_split_their_output_by_reject_as_they_decide():
    """`routed=True`: (records without a reject, records with one), the same records as the
    unrouted step's output split, for both dedups, with the class table and without it."""
    blurry = _labelled("e.jpg", "ee", "dog").rejected("blurry", "blur_laplacian_var=1.0 < 50")
    records = [_labelled("a.jpg", "aa", "owl"), _labelled("b.jpg", "aa", "dog"), blurry,
               _labelled("f.jpg", "ee", "cat"), _labelled("g.jpg", "gg", "cat")]
    hashed = [_record("a.jpg", "1", "0000000000000000"), _record("b.jpg", "2", "0000000000000001"),
              _record("c.jpg", "3", "ffffffffffffffff")]
    with fn_api_pipeline() as pipeline:
        tonight = pipeline | "Tonight" >> beam.Create(records)
        hashes = pipeline | "Hashed" >> beam.Create(hashed)
        classes = pipeline | "Table" >> beam.Create([["cat", "dog"]])
        steps = {"ExactTable": (tonight, lambda routed: DropExactDuplicates(
                     class_table=classes, lanes=3, routed=routed)),
                 "Exact": (tonight, lambda routed: DropExactDuplicates(routed=routed)),
                 "Near": (hashes, lambda routed: DropNearDuplicates(4, None, lanes=3,
                                                                    routed=routed))}
        for label, (inputs, step) in steps.items():
            whole = inputs | f"{label}Whole" >> step(False)
            kept, rejected = inputs | f"{label}Routed" >> step(True)
            for part, pcoll, with_reject in (("Kept", kept, False), ("Rejected", rejected, True)):
                expected = whole | f"{label}{part}Expected" >> beam.Filter(
                    lambda r, want=with_reject: (r.reject is not None) == want)
                _same_records(pcoll, expected, f"{label}{part}")
