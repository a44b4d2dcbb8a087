"""transforms.reporting.report: the self-contained HTML report shows counts, reasons, charts and
thumbnails, escapes user data, and makes a failed accounting visible."""
import base64
import io
import re

import numpy as np
import pytest
from PIL import Image

from transforms.codec import QUALITY_METRICS
from transforms.offline.index_table import make_row
from transforms.offline.rejects import REASONS
from transforms.reporting.report import render_report
from transforms.reporting.stats import SummarizeIndexFn, finalize_stats

EVIL_PATH = "<script>x</script>.jpg"
EVIL_LABEL = "<b>cat</b>"


def _row(path, outcome, accepted, label=None, **values):
    channel = {f"{kind}_{c}": value for kind, value in (("mean", 0.25), ("sqmean", 0.0625))
               for c in "rgb"}
    return make_row(path=path, reason=None if accepted else outcome, accepted=accepted,
                    label=label, bytes=2048,
                    format="jpeg" if accepted else "", split=outcome if accepted else None,
                    width=64 if accepted else None, height=48 if accepted else None,
                    num_boxes=0, **(channel if accepted else {}), **values)


def _stats(accounting_ok=True, thresholds=None):
    fn = SummarizeIndexFn()
    accumulator = fn.create_accumulator()
    rows = ([_row(f"train/{i}.jpg", "train", True, EVIL_LABEL, quality_blur_laplacian_var=90.0)
             for i in range(3)]
            + [_row("val/0.jpg", "validation", True, "dog", quality_blur_laplacian_var=40.0),
               _row(EVIL_PATH, "decode_error", False),
               _row("fuzzy.jpg", "blurry", False, quality_blur_laplacian_var=7.0)])
    for row in rows:
        accumulator = fn.add_input(accumulator, row)
    accounting = {"images": {"discovered": 6, "accepted": 4, "rejected": 2,
                             "ok": accounting_ok},
                  "label_rows": {"total": 5, "matched": 4, "rejected": 1, "ok": True},
                  "box_rows": {"total": 0, "matched": 0, "rejected": 0, "ok": True},
                  "ok": accounting_ok}
    stats = finalize_stats(fn.extract_output(accumulator),
                           {"image": {"decode_error": 1, "blurry": 1},
                            "label_row": {"missing_file": 1}}, accounting)
    if thresholds is not None:
        stats["thresholds"] = thresholds
    return stats


def _png_bytes():
    pixels = np.random.default_rng(3).integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _render(stats=None, thumbnails=None):
    return render_report(stats or _stats(), thumbnails or {}, title="demo", run_id="run-1")


def test_report_is_a_self_contained_page():
    page = _render()
    assert page.startswith("<!DOCTYPE html>")
    assert "<style>" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert "<script" not in page


def test_report_names_each_reason_with_its_meaning_and_count():
    page = _render()
    for reason, kind in (("decode_error", "image"), ("blurry", "image"),
                         ("missing_file", "label_row")):
        row = re.search(rf"<tr><td>{kind}</td><td><code>{reason}</code></td>"
                        rf'<td class="num">(\d+)</td><td>([^<]*)</td>', page)
        assert row is not None, reason
        assert row.group(1) == "1"
        assert row.group(2) == REASONS[reason]


def test_report_shows_totals():
    page = _render()
    for name, count in (("discovered", 6), ("accepted", 4), ("rejected", 2)):
        assert f'<tr><td>{name}</td><td class="num">{count}</td></tr>' in page


def test_report_shows_class_counts_per_split():
    page = _render()
    assert ('<tr><td><code>&lt;b&gt;cat&lt;/b&gt;</code></td><td class="num">3</td>'
            '<td class="num">0</td><td class="num">0</td><td class="num">3</td></tr>') in page
    assert ('<tr><td><code>dog</code></td><td class="num">0</td><td class="num">1</td>'
            '<td class="num">0</td><td class="num">1</td></tr>') in page


def test_report_draws_svg_charts():
    page = _render()
    # one class chart, three size histograms, one histogram per quality metric
    assert page.count("<svg") == 1 + 3 + len(QUALITY_METRICS)
    assert "<title>all decoded [5, 10): 1</title>" in page


def test_report_draws_threshold_line_when_given():
    with_threshold = _render(_stats(thresholds={"blur_laplacian_var": 25.0}))
    assert "<title>threshold 25</title>" in with_threshold
    assert "threshold 25" not in _render()


def test_report_embeds_thumbnail_bytes_as_base64_img():
    png = _png_bytes()
    page = _render(thumbnails={"blurry": [("fuzzy.jpg", png)]})
    assert f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}"' in page


def test_report_shows_placeholder_for_undecodable_thumbnail():
    page = _render(thumbnails={"decode_error": [(EVIL_PATH, None)]})
    assert '<div class="placeholder">not decodable</div>' in page


def test_report_escapes_paths_and_labels():
    page = _render(thumbnails={"decode_error": [(EVIL_PATH, None)]})
    assert "<script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;.jpg" in page
    assert "<b>cat</b>" not in page
    assert "&lt;b&gt;cat&lt;/b&gt;" in page


def test_report_escapes_title_and_run_id():
    page = render_report(_stats(), {}, title="<i>t</i>", run_id='"><x')
    assert "<i>t</i>" not in page and "&lt;i&gt;t&lt;/i&gt;" in page
    assert '"><x' not in page and "&quot;&gt;&lt;x" in page


def test_report_shows_passed_accounting_in_green():
    page = _render()
    assert '<div class="banner ok">Accounting check passed' in page
    assert '<span class="failed">' not in page


def test_report_shows_failed_accounting_in_red():
    page = _render(_stats(accounting_ok=False))
    assert '<div class="banner failed">Accounting check FAILED' in page
    assert ('<tr><td>images</td><td>discovered 6 = accepted 4 + rejected 2</td>'
            '<td><span class="failed">FAILED</span></td></tr>') in page


def test_report_checks_unfinalized_summary_itself():
    stats = _stats()
    del stats["accounting"]
    stats["images"]["rejected"] = 1  # discovered 6 != 4 + 1
    assert '<div class="banner failed">' in _render(stats)


def test_report_shows_pixel_stats_formats_and_boxes():
    page = _render()
    assert '<tr><td>R</td><td class="num">0.25</td><td class="num">0</td></tr>' in page
    assert '<tr><td><code>jpeg</code></td><td class="num">4</td></tr>' in page
    assert '<tr><td>discovered</td><td class="num">12.0 KiB</td></tr>' in page
    assert '<tr><td>boxes</td><td class="num">0</td></tr>' in page


@pytest.mark.parametrize("reason", ["decode_error", "blurry"])
def test_report_lists_example_paths_per_reason(reason):
    stats = _stats()
    page = _render(stats)
    for path in stats["reject_examples"][reason]:
        escaped = path.replace("<", "&lt;").replace(">", "&gt;")
        assert f"<code>{escaped}</code>" in page


def test_report_lists_accounting_checks_images_first():
    page = _render()
    positions = [page.index(f"<tr><td>{kind}</td><td>") for kind in
                 ("images", "label_rows", "box_rows")]
    assert positions == sorted(positions)


def test_report_marks_histogram_without_values():
    page = _render()
    # _stats() measures only blur_laplacian_var: the other quality charts have no values
    assert page.count('fill="#888">no values</text>') == len(QUALITY_METRICS) - 1


def test_report_shows_the_files_that_are_no_images_per_extension():
    stats = _stats()
    assert "skipped (not images)" not in render_report(stats, {}, title="t", run_id="r")
    stats["other_files"] = {"txt": 12, "json": 3, "(none)": 1, "<x>": 1}
    assert ('<p class="note">skipped (not images): 12 .txt, 3 .json, 1 with no extension, '
            '1 .&lt;x&gt;</p>') in render_report(stats, {}, title="t", run_id="r")


def test_the_run_summary_shows_the_files_that_are_no_images_per_extension():
    from runners.jobs.summary import format_summary
    from transforms.snapshot_layout import Snapshot
    stats = dict(_stats(), other_files={"txt": 12, "json": 3})
    accounting = dict(stats["accounting"], images=dict(stats["accounting"]["images"]))
    lines = format_summary(Snapshot("r1", "/out/snapshots/r1", accounting=accounting,
                                    stats=stats)).splitlines()
    assert lines[2:4] == ["images: 6 discovered = 4 accepted + 2 rejected  [OK]",
                          "skipped (not images): 12 .txt, 3 .json"]
