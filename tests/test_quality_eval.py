"""Tests for the labelled evaluation of `pixelmill bench quality` (runners.bench.quality_eval and
runners.bench.bench_quality): the set it writes, how outcomes are scored, targets and flags."""
from __future__ import annotations

import os

import pytest

from runners.bench import bench_quality, quality_eval
from runners.errors import UsageError
from tests.imageutil import encode, photo, write_bytes


def _photos(tmp_path, count=2, size=(200, 300)):
    return [write_bytes(tmp_path / "photos" / f"{i}.jpg", encode(photo(i, *size)))
            for i in range(count)]


def test_build_set_writes_every_variant_of_every_photo(tmp_path):
    items = quality_eval.build_set(_photos(tmp_path), str(tmp_path / "set"), size=0)
    assert len(items) == 2 * (1 + len(quality_eval.VARIANTS))
    for item in items:
        assert os.path.isfile(tmp_path / "set" / item.path)
    first = [item for item in items if item.photo == "p000"]
    assert first[0].path == "p000/00_original.jpg" and first[0].expect == "accepted"
    assert min(item.path for item in first) == first[0].path   # dedup keeps the original
    copy = next(item for item in first if item.variant == "copy")
    assert (tmp_path / "set" / copy.path).read_bytes() == \
        (tmp_path / "set" / first[0].path).read_bytes()


def test_fit_photo_only_shrinks(tmp_path):
    path = _photos(tmp_path, 1, (200, 300))[0]
    image, _data, ext = quality_eval.fit_photo(path, 150)
    assert image.shape[:2] == (100, 150) and ext == "jpg"
    image, data, _ext = quality_eval.fit_photo(path, 512)
    assert image.shape[:2] == (200, 300) and data == open(path, "rb").read()


def _items():
    return [quality_eval.Item(f"p00{p}/{n:02d}_{v}.png", f"p00{p}", v, e)
            for p in range(2) for n, (v, e) in enumerate(
                [("original", "accepted"), ("blur1", "pass"), ("blur3", "blurry"),
                 ("copy", "duplicate"), ("jpeg30", "near_duplicate")])]


def _outcome(reason, partner=None):
    return frozenset({reason}), (f"from {partner!r} (kept)" if partner else "")


def test_evaluate_counts_each_rule_and_lists_wrong_reasons():
    outcomes = {
        "p000/01_blur1.png": _outcome("near_duplicate", "p000/00_original.png"),  # allowed
        "p000/02_blur3.png": _outcome("blurry"),
        "p000/03_copy.png": _outcome("duplicate", "p000/00_original.png"),
        "p000/04_jpeg30.png": _outcome("near_duplicate", "p000/00_original.png"),
        "p001/01_blur1.png": _outcome("blurry"),                                 # false positive
        "p001/02_blur3.png": _outcome("near_duplicate", "p001/00_original.png"),  # missed
        "p001/03_copy.png": _outcome("duplicate", "p001/00_original.png"),
        "p001/04_jpeg30.png": _outcome("near_duplicate", "p000/00_original.png"),  # false pair
    }
    evaluation = quality_eval.evaluate(_items(), outcomes)
    assert evaluation.rules["blurry"] == (1, 1, 1, 7)
    assert evaluation.rules["duplicate"] == (2, 0, 0, 8)
    assert evaluation.rules["near_duplicate"] == (1, 1, 1, 7)
    assert sorted(item.path for item, _found, _detail in evaluation.wrong) == [
        "p001/01_blur1.png", "p001/02_blur3.png", "p001/04_jpeg30.png"]
    assert [item.path for item, _f, _d in evaluation.false_pairs] == ["p001/04_jpeg30.png"]
    assert evaluation.variants["blur3"][:2] == (1, 2)
    report = quality_eval.format_report("pixelmill", evaluation)
    assert "| `blurry` | 1 | 1 | 1 | 7 | 0.50 | 0.50 |" in report
    targets = {description.split(":")[0]: passed
               for passed, description, _measured in evaluation.targets}
    assert targets["byte copies"] is True
    assert targets["blur sigma >= 3"] is False
    assert targets["good originals and mild variants"] is False   # 1 of 4


def test_bench_flags_are_checked(tmp_path):
    with pytest.raises(UsageError, match="--images must be a folder"):
        bench_quality.run(["--images", str(tmp_path / "missing")])
    with pytest.raises(UsageError, match="--size must be 0"):
        bench_quality.run(["--size", "10"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no readable image"):
        bench_quality.run(["--images", str(tmp_path / "empty"), "--workdir", str(tmp_path / "w")])


def test_compare_cleanvision_without_the_package_is_a_usage_error(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_cleanvision(name, *args, **kwargs):
        if name == "cleanvision":
            raise ImportError("No module named 'cleanvision'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cleanvision)
    with pytest.raises(UsageError, match="needs the cleanvision package"):
        bench_quality.cleanvision_outcomes(str(tmp_path))


@pytest.mark.slow
def test_bench_runs_the_job_on_the_set_and_prints_the_tables(tmp_path, capsys):
    photos = tmp_path / "photos"
    write_bytes(photos / "a.png", encode(photo(3, 240, 320, 1), "PNG"))
    evaluation = bench_quality.run(["--images", str(photos), "--workdir", str(tmp_path / "w")])
    printed = capsys.readouterr().out
    assert "## pixelmill: per rule" in printed and "## pixelmill: targets" in printed
    assert evaluation.variants["copy"][:2] == (1, 1)
    assert evaluation.variants["jpeg30"][:2] == (1, 1)
    assert evaluation.variants["dark08"][:2] == (1, 1)
    assert os.path.isfile(tmp_path / "w" / "set" / "p000" / "00_original.png")
