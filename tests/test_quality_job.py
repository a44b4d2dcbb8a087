"""The offline job's verdict on generated quality cases (issue 12): each bad kind gets its own
reason (dark, washed out, flat, blurred with and without its original), a byte copy is always
`duplicate` (also of a blurry image: exact dedup sees the quality rejects), a recompression is
a `near_duplicate`. The cases are made by the evaluation's own variant makers
(`runners.bench.quality_eval.VARIANTS`), one job run for the module."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from runners.bench import quality_eval
from tests.imageutil import encode, photo, write_bytes
from tests.jobutil import rejects, run_job
from tests.tiers import slow_fixture

_MAKERS = {variant.name: variant.make for variant in quality_eval.VARIANTS}


def _variant(name: str, image: np.ndarray) -> bytes:
    return _MAKERS[name](image, np.random.default_rng(0))[0]


def _cases() -> dict:
    """{root-relative path: (bytes, expected outcome)}."""
    kept = photo(1, 240, 320, 0)
    alone = photo(2, 240, 320, 1)      # only its blurred version is in the set
    recompressed = photo(6, 240, 320, 3)
    blurred_alone = _variant("blur3", alone)
    cases = {
        "a/00_photo.png": (encode(kept, "PNG"), "accepted"),
        "a/01_photo_copy.png": (encode(kept, "PNG"), "duplicate"),
        "a/02_photo_blur3.png": (_variant("blur3", kept), "blurry"),
        "a/03_photo_blur1.png": (_variant("blur1", kept), "near_duplicate"),
        "a/04_photo_bright50.png": (_variant("bright50", kept), "near_duplicate"),
        "b/00_blur3_alone.png": (blurred_alone, "blurry"),
        "b/01_blur3_alone_copy.png": (blurred_alone, "duplicate"),
        "b/02_blur6_alone.png": (_variant("blur6", alone), "blurry"),
        "c/dark.png": (_variant("dark08", photo(3, 240, 320, 2)), "too_dark"),
        "c/washed.png": (_variant("washed", photo(4, 240, 320, 3)), "too_bright"),
        "c/flat.png": (_variant("flat", photo(5, 240, 320, 0)), "low_information"),
        "c/flat_dark.png": (_variant("flat", _variant_pixels("dark08", photo(7, 240, 320, 1))),
                            "low_information"),
        "d/00_photo.png": (encode(recompressed, "PNG"), "accepted"),
        "d/01_photo_q30.jpg": (_variant("jpeg30", recompressed), "near_duplicate"),
    }
    return cases


def _variant_pixels(name: str, image: np.ndarray) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(_variant(name, image))).convert("RGB"))


@slow_fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality_cases")
    cases = _cases()
    for rel, (data, _expected) in cases.items():
        write_bytes(root / "images" / rel, data)
    snapshot = run_job(root / "images", root / "out")
    found = {rel: "accepted" for rel in cases}
    details = {}
    for row in rejects(snapshot):
        found[row["path"]] = row["reason"]
        details[row["path"]] = row["detail"]
    return cases, found, details


def test_every_case_gets_its_own_outcome(outcomes):
    cases, found, details = outcomes
    wrong = {rel: (expected, found[rel], details.get(rel)) for rel, (_data, expected)
             in cases.items() if found[rel] != expected}
    assert not wrong


def test_a_copy_of_a_blurry_image_names_the_copy_it_duplicates(outcomes):
    _cases, _found, details = outcomes
    assert details["b/01_blur3_alone_copy.png"] == "same sha256 as 'b/00_blur3_alone.png' (kept)"
    assert details["b/00_blur3_alone.png"].startswith("blur_")


def test_blur_is_caught_by_the_quality_rule_not_by_dedup_with_its_original(outcomes):
    _cases, found, details = outcomes
    assert found["a/02_photo_blur3.png"] == "blurry"
    # the mild blur and the darker copy pass every quality rule: they are only near duplicates
    assert details["a/03_photo_blur1.png"].startswith("perceptual hash")
    assert details["a/04_photo_bright50.png"].startswith("perceptual hash")
