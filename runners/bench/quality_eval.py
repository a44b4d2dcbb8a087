"""The labelled evaluation set of `pixelmill bench quality` and how outcomes are scored.

`build_set` writes, for every good photo, the photo itself and one file per `VARIANTS` entry
under `<set>/pNNN/` (the folder is the photo; names start with a number so the original has the
lowest path, the one dedup keeps). Each file carries what the job should make of it:

- "accepted": the original;
- "pass": a mild variant: no quality rule may fire; it may be accepted or a `near_duplicate` of
  its own photo (it is one), never of another photo;
- a reason: exactly that reject (`duplicate` and `near_duplicate` naming its own photo).

`evaluate` scores outcomes (the job's, or cleanvision's mapped to the same reasons) per rule
(true/false positives and negatives, precision, recall), per variant, lists every wrong reason
and checks `TARGETS`. numpy and Pillow only: the job itself runs in `runners.bench.bench_quality`.
"""
from __future__ import annotations

import collections
import dataclasses
import io
import os
import re
from typing import Callable

import numpy as np
from PIL import Image, ImageFilter

__all__ = ["Variant", "Item", "Evaluation", "VARIANTS", "TARGETS", "RULE_REASONS",
           "QUALITY_REASONS", "CLEANVISION_ISSUES", "DEFAULT_SIZE", "find_photos",
           "fit_photo", "build_set", "evaluate", "format_report"]

DEFAULT_SIZE = 512       # photos are fitted to this long side (twice the analysis copy)
QUALITY_REASONS = ("too_dark", "too_bright", "low_information", "blurry")
RULE_REASONS = QUALITY_REASONS + ("duplicate", "near_duplicate")
# cleanvision issue type -> the pixelmill reason it corresponds to
CLEANVISION_ISSUES = {"dark": "too_dark", "light": "too_bright",
                      "low_information": "low_information", "blurry": "blurry",
                      "exact_duplicates": "duplicate", "near_duplicates": "near_duplicate"}
_PHOTO_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff")


def _encode(image: np.ndarray, fmt: str = "png", quality: int = 95) -> tuple[bytes, str]:
    buffer = io.BytesIO()
    if fmt == "jpeg":
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
        return buffer.getvalue(), "jpg"
    Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue(), "png"


def _to_uint8(values: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(values + 0.5), 0, 255).astype(np.uint8)


def _blur(sigma: float):
    def make(image, _rng):
        return _encode(np.asarray(Image.fromarray(image).filter(ImageFilter.GaussianBlur(sigma))))
    return make


def _scaled(factor: float):
    def make(image, _rng):
        return _encode(_to_uint8(image.astype(np.float32) * factor))
    return make


def _washed(image, _rng):
    values = image.astype(np.float32)
    return _encode(_to_uint8(values + 0.85 * (255.0 - values)))


def _flat(image, rng):
    mean = image.reshape(-1, 3).mean(axis=0)
    return _encode(_to_uint8(mean + rng.standard_normal(image.shape)))


def _noise(image, rng):
    return _encode(_to_uint8(image.astype(np.float32) + 4.0 * rng.standard_normal(image.shape)))


def _resized(image, _rng):
    picture = Image.fromarray(image)
    small = picture.resize((max(1, picture.width // 2), max(1, picture.height // 2)),
                           Image.Resampling.BOX)
    return _encode(np.asarray(small.resize(picture.size, Image.Resampling.BICUBIC)))


def _centre_crop(image, _rng):
    height, width = image.shape[:2]
    crop_h, crop_w = round(height * 0.92), round(width * 0.92)
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    return _encode(np.ascontiguousarray(image[top:top + crop_h, left:left + crop_w]))


def _gray(image, _rng):
    buffer = io.BytesIO()
    Image.fromarray(image).convert("L").save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue(), "png"


@dataclasses.dataclass(frozen=True)
class Variant:
    """One kind of file made from each photo: `expect` is "pass", or the reject reason."""
    name: str
    expect: str
    meaning: str
    make: Callable | None    # (uint8 RGB image, rng) -> (bytes, extension); None: byte copy


VARIANTS = (
    Variant("blur1", "pass", "Gaussian blur sigma 1 (mild)", _blur(1.0)),
    Variant("blur3", "blurry", "Gaussian blur sigma 3", _blur(3.0)),
    Variant("blur6", "blurry", "Gaussian blur sigma 6", _blur(6.0)),
    Variant("bright50", "pass", "brightness x0.5", _scaled(0.5)),
    Variant("dark08", "too_dark", "brightness x0.08", _scaled(0.08)),
    Variant("washed", "too_bright", "85% of the way to white", _washed),
    Variant("flat", "low_information", "flat fill: mean colour + noise std 1", _flat),
    Variant("noise", "pass", "Gaussian noise std 4", _noise),
    Variant("resize", "pass", "resized to half and back (box, bicubic)", _resized),
    Variant("rot90", "pass", "rotated by 90 degrees",
            lambda image, _rng: _encode(np.ascontiguousarray(np.rot90(image)))),
    Variant("gray", "pass", "grayscale", _gray),
    Variant("jpeg30", "near_duplicate", "JPEG quality 30",
            lambda image, _rng: _encode(image, "jpeg", 30)),
    Variant("crop92", "near_duplicate", "centre crop, 92% of each side", _centre_crop),
    Variant("copy", "duplicate", "byte copy of the original", None),
)


@dataclasses.dataclass(frozen=True)
class Item:
    """One file of the set: set-relative path, its photo folder, variant name, expectation."""
    path: str
    photo: str
    variant: str
    expect: str


def find_photos(root: str) -> list[str]:
    """Image files under `root` (recursively, path order) that Pillow can open."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if not name.lower().endswith(_PHOTO_EXTENSIONS):
                continue
            path = os.path.join(folder, name)
            try:
                with Image.open(path) as image:
                    image.verify()
            except Exception:  # noqa: BLE001 - an unreadable file is not a photo; skip it
                continue
            found.append(path)
    return found


def fit_photo(path: str, size: int) -> tuple[np.ndarray, bytes, str]:
    """(uint8 RGB pixels, original file bytes, extension). With `size`, a photo whose long side
    is larger is shrunk to it (Lanczos) and its original re-encoded as JPEG q95."""
    with open(path, "rb") as handle:
        data = handle.read()
    with Image.open(io.BytesIO(data)) as picture:
        fmt = (picture.format or "").lower()
        rgb = picture.convert("RGB")
    if size and max(rgb.size) > size:
        scale = size / max(rgb.size)
        rgb = rgb.resize((max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale))),
                         Image.Resampling.LANCZOS)
        image = np.asarray(rgb)
        data, ext = _encode(image, "jpeg", 95)
        return image, data, ext
    if fmt not in ("jpeg", "png"):
        data, ext = _encode(np.asarray(rgb))
        return np.asarray(rgb), data, ext
    return np.asarray(rgb), data, "jpg" if fmt == "jpeg" else "png"


def build_set(photos: list[str], set_dir: str, size: int, seed: int = 0) -> list[Item]:
    """Writes the labelled set under `set_dir` and returns its items (originals first)."""
    rng = np.random.default_rng(seed)
    items = []
    for index, source in enumerate(photos):
        photo = f"p{index:03d}"
        folder = os.path.join(set_dir, photo)
        os.makedirs(folder, exist_ok=True)
        image, original, ext = fit_photo(source, size)
        files = [("00_original", "accepted", original, ext)]
        for number, variant in enumerate(VARIANTS, start=1):
            data, variant_ext = (original, ext) if variant.make is None \
                else variant.make(image, rng)
            files.append((f"{number:02d}_{variant.name}", variant.expect, data, variant_ext))
        for stem, expect, data, file_ext in files:
            with open(os.path.join(folder, f"{stem}.{file_ext}"), "wb") as handle:
                handle.write(data)
            items.append(Item(f"{photo}/{stem}.{file_ext}", photo, stem.split("_", 1)[1],
                              expect))
    return items


_QUOTED = re.compile(r"""(['"])(.+?)\1""")


def _partner_photo(detail: str) -> str | None:
    """The photo folder of the first path quoted in a dedup detail (the image kept)."""
    match = _QUOTED.search(detail or "")
    return match.group(2).split("/", 1)[0] if match else None


def _is_right(item: Item, outcomes: frozenset, detail: str) -> bool:
    same_photo = _partner_photo(detail) == item.photo
    if item.expect == "accepted":
        return outcomes == {"accepted"}
    if item.expect == "pass":
        return (outcomes <= {"accepted", "near_duplicate"}
                and ("near_duplicate" not in outcomes or same_photo))
    if item.expect in ("duplicate", "near_duplicate"):
        return item.expect in outcomes and same_photo
    return item.expect in outcomes


def _false_pair(item: Item, outcomes: frozenset, detail: str) -> bool:
    return bool(outcomes & {"duplicate", "near_duplicate"}) and \
        _partner_photo(detail) not in (None, item.photo)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Scored outcomes. `rules`: {reason: (tp, fp, fn, tn)}; `variants`: {variant: (right,
    total, Counter of wrong outcomes)}; `wrong`: [(item, outcomes, detail)]; `targets`:
    [(passed, description, measured)]."""
    items: tuple
    rules: dict
    variants: dict
    wrong: list
    false_pairs: list
    targets: list


def _rule_counts(items, outcomes) -> dict:
    counts = {}
    for reason in RULE_REASONS:
        tp = fp = fn = tn = 0
        for item in items:
            found, detail = outcomes[item.path]
            flagged = reason in found
            if item.expect == reason:
                right = flagged and _is_right(item, found, detail)
                tp, fn = tp + right, fn + (not right)
            elif flagged and not (reason == "near_duplicate" and item.expect == "pass"
                                  and _partner_photo(detail) == item.photo):
                fp += 1
            else:
                tn += 1
        counts[reason] = (tp, fp, fn, tn)
    return counts


def _share(items, outcomes, variants, test) -> tuple[int, int]:
    chosen = [item for item in items if item.variant in variants]
    return sum(1 for item in chosen if test(item, *outcomes[item.path])), len(chosen)


def _check_targets(items, outcomes, false_pairs) -> list:
    results = []
    for description, variants, test, rule in TARGETS:
        hits, total = _share(items, outcomes, variants, test)
        results.append((rule(hits, total), description, f"{hits}/{total}"))
    results[-1] = (results[-1][0] and not false_pairs, results[-1][1],
                   f"{results[-1][2]}, {len(false_pairs)} false pair(s) between photos")
    return results


def _any_quality(item, found, _detail) -> bool:
    return bool(found & set(QUALITY_REASONS))


_GOOD = ("original",) + tuple(v.name for v in VARIANTS if v.expect == "pass")

# (description, variants, test per item, rule on (hits, total)); the last one also needs no
# false pair between different photos.
TARGETS = (
    ("dark, washed-out and flat variants: every one rejected with its own reason",
     ("dark08", "washed", "flat"), _is_right, lambda hits, total: hits == total),
    ("blur sigma >= 3: >= 90% rejected as blurry (quality is judged before near dedup, so "
     "the same without the original)", ("blur3", "blur6"), _is_right,
     lambda hits, total: hits >= 0.9 * total),
    ("good originals and mild variants: at most 1 in 50 rejected by a quality rule", _GOOD,
     _any_quality, lambda hits, total: hits * 50 <= total),
    ("byte copies: 100% duplicate", ("copy",), _is_right, lambda hits, total: hits == total),
    ("JPEG q30 recompressions: >= 95% near_duplicate", ("jpeg30",), _is_right,
     lambda hits, total: hits >= 0.95 * total),
    ("92% centre crops (dedup.crop_tolerant on): >= 60% near_duplicate", ("crop92",), _is_right,
     lambda hits, total: hits >= 0.6 * total),
)


def evaluate(items: list[Item], outcomes: dict) -> Evaluation:
    """Scores `outcomes` ({path: (frozenset of outcomes, detail)}; a path missing is
    "accepted") against the items' expectations."""
    outcomes = {item.path: outcomes.get(item.path, (frozenset({"accepted"}), ""))
                for item in items}
    variants = collections.OrderedDict()
    wrong, false_pairs = [], []
    for item in items:
        found, detail = outcomes[item.path]
        right, total, instead = variants.get(item.variant, (0, 0, collections.Counter()))
        if _is_right(item, found, detail):
            right += 1
        else:
            wrong.append((item, found, detail))
            instead.update(sorted(found))
        if _false_pair(item, found, detail):
            false_pairs.append((item, found, detail))
        variants[item.variant] = (right, total + 1, instead)
    return Evaluation(tuple(items), _rule_counts(items, outcomes), dict(variants), wrong,
                      false_pairs, _check_targets(items, outcomes, false_pairs))


def _ratio(numerator: int, denominator: int) -> str:
    return f"{numerator / denominator:.2f}" if denominator else "-"


def format_report(tool: str, evaluation: Evaluation, max_wrong: int = 40) -> str:
    """The tables `pixelmill bench quality` prints for one tool."""
    lines = [f"## {tool}: per rule", "",
             "| rule | TP | FP | FN | TN | precision | recall |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for reason, (tp, fp, fn, tn) in evaluation.rules.items():
        lines.append(f"| `{reason}` | {tp} | {fp} | {fn} | {tn} | {_ratio(tp, tp + fp)} | "
                     f"{_ratio(tp, tp + fn)} |")
    expects = {item.variant: item.expect for item in evaluation.items}
    lines += ["", f"## {tool}: per variant", "", "| variant | expected | right | instead |",
              "| --- | --- | ---: | --- |"]
    for variant, (right, total, instead) in evaluation.variants.items():
        other = ", ".join(f"{count} {outcome}" for outcome, count in instead.most_common())
        lines.append(f"| {variant} | {expects[variant]} | {right}/{total} | {other or '-'} |")
    lines += ["", f"## {tool}: wrong reasons ({len(evaluation.wrong)})", ""]
    for item, found, detail in evaluation.wrong[:max_wrong]:
        lines.append(f"- {item.path}: expected {item.expect}, got {', '.join(sorted(found))}"
                     f"{' (' + detail[:110] + ')' if detail else ''}")
    if len(evaluation.wrong) > max_wrong:
        lines.append(f"- ... and {len(evaluation.wrong) - max_wrong} more")
    lines += ["", f"## {tool}: targets", ""]
    for passed, description, measured in evaluation.targets:
        lines.append(f"- {'PASS' if passed else 'MISS'}  {description}: {measured}")
    return "\n".join(lines) + "\n"
