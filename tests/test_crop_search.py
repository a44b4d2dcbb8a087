"""Crop-tolerant near duplicates (dedup.crop_tolerant, issue 12 item 4): the centre hash, the
in-bucket search against a brute-force reference, the Beam step's decisions and details, and
the job on a generated photo, its 92% centre crop and unrelated photos (option on and off)."""
from __future__ import annotations

import collections
import io

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import equal_to
from PIL import Image

from runners.bench import quality_eval
from runners.jobs import nightly
from tests.beamutil import assert_that, beam_pipeline, fn_api_pipeline
from tests.imageutil import encode, photo, write_bytes
from tests.jobutil import index_rows, rejects, run_job
from tests.tiers import shared_fixture
from transforms.offline import image_hash, quality
from transforms.offline.crop_search import CENTER, FULL, search_crop_bucket
from transforms.offline.dedup import DropNearDuplicates
from transforms.offline.image_record import ImageRecord

_CROP = {variant.name: variant.make for variant in quality_eval.VARIANTS}["crop92"]


def _crop92(image: np.ndarray) -> np.ndarray:
    data = _CROP(image, np.random.default_rng(0))[0]
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_a_centre_crop_hashes_close_to_its_photos_centre_hash_not_to_its_full_hash():
    for seed in (0, 5, 9):
        image = photo(seed, 240, 320, seed % 4)
        analysis = quality.analyse(image, 256, center=True)
        crop_hash = quality.perceptual_hash(_crop92(image))
        assert analysis.center_phash == quality.center_hash(image)
        assert image_hash.hamming(analysis.center_phash, crop_hash) <= 4
        assert image_hash.hamming(analysis.phash, crop_hash) > 4
    assert quality.analyse(image, 256).center_phash is None


def _brute_force(centers, fulls, archive, max_hamming, archive_centers=()):
    best = {}
    for other, full in fulls:   # tonight's full hash close to an archived centre hash
        for run_id, rel, center in archive_centers:
            if image_hash.hamming(center, full) <= max_hamming:
                found = (0, image_hash.hamming(center, full), f"{rel!r} in snapshot {run_id}", FULL)
                best[other] = min(best.get(other, found), found)
    for path, center in centers:
        for run_id, rel, full in archive:
            if image_hash.hamming(center, full) <= max_hamming:
                found = (0, image_hash.hamming(center, full), f"{rel!r} in snapshot {run_id}",
                         CENTER)
                best[path] = min(best.get(path, found), found)
        for other, full in fulls:
            if other < path and image_hash.hamming(center, full) <= max_hamming:
                found = (1, image_hash.hamming(center, full), repr(other), CENTER)
                best[path] = min(best.get(path, found), found)
            if path < other and image_hash.hamming(center, full) <= max_hamming:
                found = (1, image_hash.hamming(center, full), repr(path), FULL)
                best[other] = min(best.get(other, found), found)
    return best


def _bucketed(centers, fulls, archive, max_hamming, archive_centers=()):
    """The search as DropNearDuplicates runs it: per band bucket, combined with min."""
    buckets = collections.defaultdict(lambda: ([], [], [], []))
    for side, members in ((0, centers), (1, fulls)):
        for path, phash in members:
            for key in image_hash.hash_bands(phash, max_hamming):
                buckets[key][side].append((path, phash))
    for side, members in ((2, archive), (3, archive_centers)):
        for run_id, rel, phash in members:
            for key in image_hash.hash_bands(phash, max_hamming):
                buckets[key][side].append((run_id, rel, phash))
    best = {}
    for (band, _value), (c, f, a, ac) in sorted(buckets.items()):
        found, _compared = search_crop_bucket(c, f, a, max_hamming, band, ac)
        for path, neighbour in found:
            best[path] = min(best.get(path, neighbour), neighbour)
    return best


def _near(rng, base: int, bits: int) -> str:
    flips = rng.choice(64, size=bits, replace=False)
    return f"{base ^ sum(1 << int(b) for b in flips):016x}"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bucketed_crop_search_equals_the_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    bases = [int(v) for v in rng.integers(0, 2**63, 6)]   # clusters of near hashes
    centers, fulls, archive, archive_centers = [], [], [], []
    for k in range(60):
        base = bases[k % len(bases)]
        path = f"img{int(rng.integers(0, 40)):02d}_{k}.jpg"
        fulls.append((path, _near(rng, base, int(rng.integers(0, 9)))))
        if k % 5:
            centers.append((path, _near(rng, base, int(rng.integers(0, 9)))))
        if k % 7 == 0:
            archive.append((f"run{k % 3}", f"old/{k}.jpg",
                            _near(rng, base, int(rng.integers(0, 9)))))
        if k % 9 == 0:
            archive_centers.append((f"run{k % 2}", f"old/c{k}.jpg",
                                    _near(rng, base, int(rng.integers(0, 9)))))
    for max_hamming in (0, 3, 4):
        for with_centers in ((), archive_centers):
            expected = _brute_force(centers, fulls, archive, max_hamming, with_centers)
            assert _bucketed(centers, fulls, archive, max_hamming, with_centers) == expected
    assert expected, "the clusters must hold close pairs"
    assert any(n[3] == FULL and n[0] == 0 for n in expected.values()), "archived centres match"


def _record(path: str, phash: str, center: str | None) -> ImageRecord:
    return ImageRecord(uri=f"/data/{path}", path=path, file_bytes=100, sha256=path,
                       phash=phash, center_phash=center)


def _crop_detail(text: str) -> str:
    return f"{text} (<= dedup.crop_max_hamming=4; the earlier or lower path is kept)"


def test_drop_near_duplicates_with_the_crop_search_names_the_hash_that_matched():
    records = [
        _record("a.jpg", "00000000ffffffff", "0f0f0f0f0f0f0f0f"),   # a photo
        _record("b.jpg", "0f0f0f0f0f0f0f0e", "ffffffff00000000"),   # a crop: 1 bit from a's centre
        _record("c.jpg", "3333333333333333", "f0f0f0f0f0f0f0f3"),   # centre 2 bits from z's full
        _record("d.jpg", "5555555555555555", "00000000ffffff3f"),   # centre 2 bits from a's full
        _record("e.jpg", "cccccccccccccccc", "aaaaaaaaaaaaaaaa"),   # far from everything
    ]
    archive = [("old/z.jpg", "f0f0f0f0f0f0f0f0", "run1")]
    with fn_api_pipeline() as pipeline:
        archived = pipeline | "Archive" >> beam.Create(archive)
        kept = (pipeline | "Tonight" >> beam.Create(records)
                | DropNearDuplicates(4, archived, crop_max_hamming=4))
        assert_that(kept, equal_to([
            records[0],
            records[1].rejected("near_duplicate", _crop_detail(
                "perceptual hash 1 bit(s) from the center-crop hash of 'a.jpg'")),
            records[2].rejected("near_duplicate", _crop_detail(
                "center-crop hash 2 bit(s) from the perceptual hash of 'old/z.jpg' in snapshot "
                "run1")),
            records[3].rejected("near_duplicate", _crop_detail(
                "center-crop hash 2 bit(s) from the perceptual hash of 'a.jpg'")),
            records[4],
        ]))


def test_a_crop_of_an_archived_photo_is_caught_through_the_archived_centre_hash():
    records = [_record("crop.jpg", "0f0f0f0f0f0f0f0c", None),   # 2 bits from y's centre
               _record("other.jpg", "cccccccccccccccc", None)]
    archive = [("old/y.jpg", "00000000ffffffff", "run1")]
    centers = [("old/y.jpg", "0f0f0f0f0f0f0f0f", "run1")]
    with fn_api_pipeline() as pipeline:
        kept = (pipeline | "Tonight" >> beam.Create(records)
                | DropNearDuplicates(4, pipeline | "Archive" >> beam.Create(archive),
                                     crop_max_hamming=4,
                                     archive_centers=pipeline | "Centers" >> beam.Create(centers)))
        assert_that(kept, equal_to([
            records[0].rejected("near_duplicate", _crop_detail(
                "perceptual hash 2 bit(s) from the center-crop hash of 'old/y.jpg' in snapshot "
                "run1")),
            records[1]]))


def test_hot_crop_buckets_searched_in_parts_give_the_same_decisions():
    rng = np.random.default_rng(7)
    center = int(rng.integers(0, 2**63))
    records, archive, centers = [], [], []
    for k in range(240):   # most hashes in one hot cluster around `center`, both kinds
        base = center if k % 4 else int(rng.integers(0, 2**63))
        records.append(_record(f"img{k:03d}.jpg", _near(rng, base, int(rng.integers(0, 7))),
                               _near(rng, base, int(rng.integers(0, 7))) if k % 3 else None))
        if k % 11 == 0:
            archive.append((f"old/{k}.jpg", _near(rng, base, int(rng.integers(0, 7))), "run1"))
            centers.append((f"old/{k}.jpg", _near(rng, base, int(rng.integers(0, 7))), "run1"))
    pipeline = beam_pipeline()
    kept = pipeline | "Tonight" >> beam.Create(records)
    archived = pipeline | "Archive" >> beam.Create(archive)
    archived_centers = pipeline | "ArchiveCenters" >> beam.Create(centers)
    whole = kept | "Whole" >> DropNearDuplicates(4, archived, hot_bucket_values=None,
                                                 crop_max_hamming=4,
                                                 archive_centers=archived_centers)
    split = kept | "InParts" >> DropNearDuplicates(4, archived, hot_bucket_values=5,
                                                   crop_max_hamming=4,
                                                   archive_centers=archived_centers)
    both = ({"whole": whole | "KeyWhole" >> beam.Map(lambda r: (r.path, r)),
             "split": split | "KeySplit" >> beam.Map(lambda r: (r.path, r))}
            | beam.CoGroupByKey())
    differ = both | beam.Filter(lambda kv: list(kv[1]["whole"]) != list(kv[1]["split"])
                                or len(kv[1]["whole"]) != 1)
    assert_that(differ, equal_to([]), label="SameDecisions")
    crops = (whole
             | beam.Filter(lambda r: r.reject is not None and "center-crop" in r.reject.detail)
             | beam.combiners.Count.Globally())
    assert_that(crops | beam.Map(lambda n: n > 5), equal_to([True]), label="SomeCropRejects")
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
    assert counters["near_dup_crop_hot_buckets"] >= 1


def test_without_the_crop_search_centre_hashes_are_not_compared():
    records = [_record("a.jpg", "00000000ffffffff", "0f0f0f0f0f0f0f0f"),
               _record("b.jpg", "0f0f0f0f0f0f0f0e", None)]
    with fn_api_pipeline() as pipeline:
        archived = pipeline | "Archive" >> beam.Create([])
        kept = pipeline | "Tonight" >> beam.Create(records) | DropNearDuplicates(4, archived)
        assert_that(kept, equal_to(records))


@shared_fixture(scope="module")
def photo_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("crop_cases") / "images"
    original = photo(5, 240, 320, 1)
    write_bytes(root / "a" / "00_photo.png", encode(original, "PNG"))
    write_bytes(root / "a" / "01_photo_crop92.png", encode(_crop92(original), "PNG"))
    for seed in (1, 2, 3, 4):        # unrelated photos, each with nothing near it
        write_bytes(root / "b" / f"{seed}.png", encode(photo(10 + seed, 240, 320, seed % 4),
                                                       "PNG"))
    return root


def _outcomes(photo_set, out, crop: bool) -> dict:
    snapshot = run_job(photo_set, out, sets=(f"dedup.crop_tolerant={str(crop).lower()}",))
    return {row["path"]: (row["reason"], row["detail"]) for row in rejects(snapshot)}


@pytest.mark.slow
def test_the_job_rejects_a_centre_crop_only_with_the_option_on(photo_set, tmp_path):
    assert _outcomes(photo_set, tmp_path / "off", crop=False) == {}
    assert _outcomes(photo_set, tmp_path / "on", crop=True) == {
        "a/01_photo_crop92.png": ("near_duplicate", _crop_detail(
            "perceptual hash 0 bit(s) from the center-crop hash of 'a/00_photo.png'"))}


@pytest.mark.slow
def test_a_crop_that_arrives_a_night_later_is_caught_through_the_index(tmp_path):
    root = tmp_path / "images"
    original = photo(5, 240, 320, 1)
    write_bytes(root / "a" / "00_photo.png", encode(original, "PNG"))
    write_bytes(root / "b" / "1.png", encode(photo(11, 240, 320, 1), "PNG"))
    argv = ["--data_root", str(root), "--output_dir", str(tmp_path / "out"),
            "--set", "decode.isolation=inline", "--set", "transform.enabled=false",
            "--set", "report.thumbnails_per_reason=0",
            "--set", "dedup.crop_tolerant=true"]
    first = nightly.run(argv)
    center = index_rows(first.snapshot)["a/00_photo.png"]["center_phash"]
    assert center and len(center) == 16
    write_bytes(root / "z" / "crop.png", encode(_crop92(original), "PNG"))
    second = nightly.run(argv)
    assert {r["path"]: (r["reason"], r["detail"]) for r in rejects(second.snapshot)} == {
        "z/crop.png": ("near_duplicate", _crop_detail(
            f"perceptual hash 0 bit(s) from the center-crop hash of 'a/00_photo.png' in "
            f"snapshot {first.run_id}"))}
