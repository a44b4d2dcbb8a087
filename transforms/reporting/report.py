"""report.html: what a person reads after a run, as one self-contained page.

`render_report` turns the stats dict (`transforms.reporting.stats.finalize_stats`) and a few rejected-image
thumbnails into plain HTML with inline CSS and inline SVG charts: no external assets, no
JavaScript, so the file opens the same from a laptop, a bucket or an email attachment. Paths and
labels are user data and are HTML-escaped everywhere they appear.
"""
from __future__ import annotations

import base64
import html
from typing import Mapping, Sequence

from configs.schema import SPLITS
from transforms.codec import QUALITY_METRICS
from transforms.offline.file_kinds import OTHER_FILES, describe_other_files
from transforms.offline.rejects import IMAGE, KINDS, REASONS

__all__ = ["render_report"]

_SPLIT_COLORS = {"train": "#4c78a8", "validation": "#f58518", "test": "#54a24b"}
_OTHER_SPLIT_COLOR = "#9d755d"
_ALL_DECODED_COLOR = "#c6d4e6"
_ACCEPTED_COLOR = "#4c78a8"
_THRESHOLD_COLOR = "#d62728"
_MAX_CHART_CLASSES = 40
_MAX_LABEL_CHARS = 28
_ACCOUNTING_ORDER = ("images", "label_rows", "box_rows")

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       margin: 2em auto; max-width: 1100px; padding: 0 1em; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em;
margin-top: 2em; }
.meta { color: #666; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.7em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #1a7f37; font-weight: bold; } .failed { color: #c62828; font-weight: bold; }
.banner { padding: 0.6em 1em; border-radius: 4px; margin: 0.8em 0; }
.banner.ok { background: #e6f4ea; border: 1px solid #1a7f37; }
.banner.failed { background: #fdecea; border: 1px solid #c62828; }
code { background: #f4f4f4; padding: 0 0.2em; word-break: break-all; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
.chart { border: 1px solid #eee; padding: 0.5em; }
.chart h3 { margin: 0 0 0.3em 0; font-size: 1em; }
.thumbs { display: flex; flex-wrap: wrap; gap: 0.8em; margin-bottom: 1em; }
figure { margin: 0; width: 140px; font-size: 0.8em; word-break: break-all; }
figure img { max-width: 128px; max-height: 128px; border: 1px solid #ccc; display: block; }
.placeholder { width: 128px; height: 96px; border: 1px dashed #c62828; color: #c62828;
               display: flex; align-items: center; justify-content: center; }
.legend span { display: inline-block; width: 0.9em; height: 0.9em; margin: 0 0.3em 0 1em;
               vertical-align: middle; }
.note { color: #666; font-size: 0.9em; }
"""


def _e(value) -> str:
    """HTML-escaped text of value (quotes too, so it is safe inside attributes)."""
    return html.escape(str(value), quote=True)


def _number(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"


def _tick(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bytes_text(count: int) -> str:
    if count < 1024:
        return f"{count:,} B"
    size, unit = float(count), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):  # noqa: B007 - the last unit is used below
        size /= 1024
        if size < 1024:
            break
    return f"{size:,.1f} {unit}"


def _status(ok: bool) -> str:
    return '<span class="ok">OK</span>' if ok else '<span class="failed">FAILED</span>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()
           ) -> str:
    """A table from already-escaped cell HTML; columns in `numeric` are right-aligned."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
                         for i, cell in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _split_order(splits) -> list:
    splits = set(splits)
    return [s for s in SPLITS if s in splits] + sorted(splits - set(SPLITS))


def _split_color(split: str) -> str:
    return _SPLIT_COLORS.get(split, _OTHER_SPLIT_COLOR)


# ---------------------------------------------------------------------------------- sections


def _accounting_section(stats: Mapping) -> str:
    images = stats["images"]
    accounting = stats.get("accounting")
    if accounting is None:
        # Not finalized: check what the index summary itself knows.
        ok = images["discovered"] == images["accepted"] + images["rejected"]
        accounting = {"images": dict(images, ok=ok), "ok": ok}
    rows = []
    known = [kind for kind in _ACCOUNTING_ORDER if kind in accounting]
    for kind in known + sorted(set(accounting) - set(known)):
        check = accounting[kind]
        if kind == "ok" or not isinstance(check, Mapping):
            continue
        if {"discovered", "accepted", "rejected"} <= set(check):
            equation = (f"discovered {_number(check['discovered'])} = accepted "
                        f"{_number(check['accepted'])} + rejected {_number(check['rejected'])}")
            if check.get("skipped"):
                equation += (f" + unchanged since an earlier snapshot "
                             f"{_number(check['skipped'])}")
        elif {"before", "added", "retired", "after"} <= set(check):  # the live set
            equation = _e("live before {before:,} + added {added:,} - retired {retired:,} = live "
                          "now {after:,} ".format(**check) + str(check["retired_by_reason"]))
        elif {"total", "matched", "rejected"} <= set(check):
            equation = (f"total {_number(check['total'])} = matched {_number(check['matched'])}"
                        f" + rejected {_number(check['rejected'])}")
        else:
            equation = ", ".join(f"{_e(k)} {_e(_number(v))}" for k, v in check.items()
                                 if k != "ok")
        rows.append([_e(kind), equation, _status(bool(check.get("ok")))])
    overall = bool(accounting.get("ok"))
    banner = ("Accounting check passed: every input is accounted for." if overall else
              "Accounting check FAILED: some inputs are neither accepted nor rejected "
              "(or counted twice).")
    totals = _table(["images", "count"], [[name, _number(images[name])] for name in (
        "discovered", "accepted", "rejected")], numeric=(1,))
    other = describe_other_files(stats.get(OTHER_FILES) or {})  # "12 .txt, 3 .json"
    return ("<h2>Totals and accounting</h2>" + totals
            + (f'<p class="note">skipped (not images): {_e(other)}</p>' if other else "")
            + f'<div class="banner {"ok" if overall else "failed"}">{_e(banner)}</div>'
            + _table(["input", "check", "status"], rows))


def _nightly_section(stats: Mapping) -> str:
    """Tonight against the archive (nightly runs only): drift verdicts and cumulative totals."""
    drift, cumulative = stats.get("drift"), stats.get("cumulative")
    if not drift and not cumulative:
        return ""
    parts = ["<h2>Tonight and the archive</h2>"]
    if drift:
        if not drift.get("checked"):
            parts.append(f"<p>Drift not checked: {_e(drift.get('reason', ''))}</p>")
        else:
            parts.append(f"<p>Drift: {_status(not drift['drifted'])}</p>")
            parts.append(_table(
                ["check", "statistic", "value", "threshold", "verdict"],
                [[_e(c["name"]), _e(c["statistic"]), f"{c['value']:.4f}", _e(c["threshold"]),
                  _status(not c["drifted"])] for c in drift.get("checks", [])],
                numeric=(2, 3)))
            for alarm in drift.get("alarms", []):
                parts.append(f'<p class="failed">{_e(alarm["detail"])}</p>')
    if cumulative:
        images = cumulative.get("images", {})
        parts.append(f"<p>Cumulative over {_number(cumulative.get('snapshots', 0))} snapshots: "
                     f"{_number(images.get('accepted', 0))} accepted, "
                     f"{_number(images.get('rejected', 0))} rejected.</p>")
        splits = _split_order(cumulative.get("by_split_class", {}))
        names = sorted({n for per in cumulative.get("by_split_class", {}).values() for n in per})
        parts.append(_table(
            ["class"] + [_e(s) for s in splits],
            [[_e(n)] + [_number(cumulative["by_split_class"].get(s, {}).get(n, 0))
                        for s in splits] for n in names],
            numeric=tuple(range(1, len(splits) + 1))))
    return "".join(parts)


def _class_section(stats: Mapping) -> str:
    by_split_class = stats["by_split_class"]
    splits = _split_order(set(stats["by_split"]) | set(by_split_class))
    classes = sorted({c for counts in by_split_class.values() for c in counts})
    totals = {c: sum(by_split_class.get(s, {}).get(c, 0) for s in splits) for c in classes}
    ranked = sorted(classes, key=lambda c: (-totals[c], c))
    rows = [[f"<code>{_e(c)}</code>"]
            + [_number(by_split_class.get(s, {}).get(c, 0)) for s in splits]
            + [_number(totals[c])] for c in ranked]
    rows.append(["<b>all classes</b>"] + [_number(stats["by_split"].get(s, 0)) for s in splits]
                + [_number(stats["images"]["accepted"])])
    table = _table(["class"] + [_e(s) for s in splits] + ["total"], rows,
                   numeric=tuple(range(1, len(splits) + 2)))
    if not classes:
        return "<h2>Class balance</h2><p>No accepted images.</p>" + table
    return ("<h2>Class balance</h2>" + _class_chart(by_split_class, splits, ranked, totals)
            + table)


def _class_chart(by_split_class: Mapping, splits: list, ranked: list, totals: Mapping) -> str:
    """Horizontal bars, one per class (largest first), stacked by split."""
    shown = ranked[:_MAX_CHART_CLASSES]
    label_width, bar_width, row_height, top = 200, 520, 18, 10
    height = top + row_height * len(shown) + 10
    largest = max(totals[c] for c in shown) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_width + bar_width + 60}" '
             f'height="{height}" role="img" aria-label="class balance per split">']
    for row, name in enumerate(shown):
        y = top + row * row_height
        label = name if len(name) <= _MAX_LABEL_CHARS else name[:_MAX_LABEL_CHARS - 1] + "…"
        parts.append(f'<text x="{label_width - 6}" y="{y + 12}" font-size="11" '
                     f'text-anchor="end">{_e(label)}</text>')
        x = float(label_width)
        for split in splits:
            count = by_split_class.get(split, {}).get(name, 0)
            if not count:
                continue
            width = bar_width * count / largest
            parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{width:.1f}" height="'
                         f'{row_height - 4}" fill="{_split_color(split)}"><title>{_e(name)} / '
                         f'{_e(split)}: {count}</title></rect>')
            x += width
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 12}" font-size="11">'
                     f'{totals[name]}</text>')
    parts.append("</svg>")
    legend = '<div class="legend">' + "".join(
        f'<span style="background:{_split_color(s)}"></span>{_e(s)}' for s in splits) + "</div>"
    note = ""
    if len(ranked) > len(shown):
        note = (f'<p class="note">The chart shows the {len(shown)} largest classes; the table '
                f"lists all {len(ranked)}.</p>")
    return legend + "".join(parts) + note


def _reject_section(stats: Mapping) -> str:
    by_kind = stats.get("rejects_by_kind") or {IMAGE: stats["by_reason"]}
    examples = stats.get("reject_examples", {})
    rows = []
    for kind in [k for k in KINDS if k in by_kind] + sorted(set(by_kind) - set(KINDS)):
        for reason, count in sorted(by_kind[kind].items(), key=lambda item: (-item[1], item[0])):
            paths = examples.get(reason, []) if kind == IMAGE else []
            rows.append([_e(kind), f"<code>{_e(reason)}</code>", _number(count),
                         _e(REASONS.get(reason, "(not a documented reason)")),
                         "<br>".join(f"<code>{_e(p)}</code>" for p in paths)])
    if not rows:
        return "<h2>Rejects</h2><p>Nothing was rejected.</p>"
    return ("<h2>Rejects</h2>"
            + _table(["input", "reason", "count", "meaning", "example paths"], rows,
                     numeric=(2,)))


def _image_mime(data: bytes) -> str:
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    return "image/png"


def _thumbnail_section(thumbnails: Mapping[str, Sequence[tuple]]) -> str:
    if not any(thumbnails.values()):
        return ""
    parts = ["<h2>Rejected images</h2>"]
    for reason in sorted(thumbnails):
        items = thumbnails[reason]
        if not items:
            continue
        parts.append(f"<h3><code>{_e(reason)}</code>: {_e(REASONS.get(reason, ''))}</h3>")
        parts.append('<div class="thumbs">')
        for path, data in items:
            if data is None:
                picture = '<div class="placeholder">not decodable</div>'
            else:
                encoded = base64.b64encode(data).decode("ascii")
                picture = (f'<img src="data:{_image_mime(data)};base64,{encoded}" '
                           f'alt="{_e(path)}">')
            parts.append(f"<figure>{picture}<figcaption><code>{_e(path)}</code>"
                         f"</figcaption></figure>")
        parts.append("</div>")
    return "".join(parts)


def _x_of(value: float, edges: Sequence[float], left: float, bin_width: float) -> float:
    """Where value falls on a chart drawing every bin equally wide (edges may be uneven)."""
    if value <= edges[0]:
        return left
    for index in range(len(edges) - 1):
        if value <= edges[index + 1]:
            fraction = (value - edges[index]) / (edges[index + 1] - edges[index])
            return left + bin_width * (index + fraction)
    return left + bin_width * (len(edges) - 1)


def _histogram_svg(edges: Sequence[float], series: Sequence[tuple], threshold=None) -> str:
    """Overlaid bars per bin, one layer per (name, counts, color) in series, drawn in order.

    Every bin is drawn equally wide whatever its edges; a threshold is a dashed vertical line.
    """
    left, top, plot_width, plot_height, bottom = 44, 8, 340, 120, 34
    bins = len(edges) - 1
    bin_width = plot_width / bins
    largest = max([max(counts) for _, counts, _ in series if counts] + [1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + plot_width + 24}" '
             f'height="{top + plot_height + bottom}" role="img">']
    for name, counts, color in series:
        for index, count in enumerate(counts):
            if not count:
                continue
            bar_height = plot_height * count / largest
            parts.append(
                f'<rect x="{left + index * bin_width + 1:.1f}" '
                f'y="{top + plot_height - bar_height:.1f}" width="{bin_width - 2:.1f}" '
                f'height="{bar_height:.1f}" fill="{color}"><title>{_e(name)} '
                f'[{_tick(edges[index])}, {_tick(edges[index + 1])}): {count}</title></rect>')
    axis_y = top + plot_height
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_width}" y2="{axis_y}" '
                 f'stroke="#444"/>')
    parts.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{axis_y}" stroke="#444"/>')
    parts.append(f'<text x="{left - 4}" y="{top + 9}" font-size="10" text-anchor="end">'
                 f'{largest}</text>')
    parts.append(f'<text x="{left - 4}" y="{axis_y}" font-size="10" text-anchor="end">0</text>')
    step = max(1, -(-bins // 6))
    ticks = list(range(0, bins + 1, step))
    if ticks[-1] != bins:  # always label the last edge, replacing a tick too close to it
        ticks[-1 if bins - ticks[-1] < step / 2 else len(ticks):] = [bins]
    for index in ticks:
        x = left + index * bin_width
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 13}" font-size="10" '
                     f'text-anchor="middle">{_tick(edges[index])}</text>')
    if not any(count for _, counts, _ in series for count in counts):
        parts.append(f'<text x="{left + plot_width / 2:.1f}" y="{top + plot_height / 2:.1f}" '
                     f'font-size="12" text-anchor="middle" fill="#888">no values</text>')
    if threshold is not None:
        x = _x_of(threshold, edges, left, bin_width)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}" '
                     f'stroke="{_THRESHOLD_COLOR}" stroke-width="2" stroke-dasharray="4 3">'
                     f'<title>threshold {_tick(threshold)}</title></line>')
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 27}" font-size="10" text-anchor="middle" '
                     f'fill="{_THRESHOLD_COLOR}">threshold {_tick(threshold)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _summary_line(summary: Mapping) -> str:
    return (f'<div class="note">n={_number(summary["count"])}, min {_number(summary["min"])}, '
            f'max {_number(summary["max"])}, mean {_number(summary["mean"])}, '
            f'std {_number(summary["std"])}</div>')


def _size_section(stats: Mapping) -> str:
    charts = []
    for name in ("width", "height", "megapixels"):
        summary = stats["size"][name]
        svg = _histogram_svg(summary["histogram"]["edges"],
                             [("accepted", summary["histogram"]["counts"], _ACCEPTED_COLOR)])
        charts.append(f'<div class="chart"><h3>{_e(name)}</h3>{svg}{_summary_line(summary)}'
                      f"</div>")
    return ("<h2>Image sizes (accepted)</h2>"
            '<p class="note">The first and last bars also hold values beyond the axis ends.</p>'
            f'<div class="charts">{"".join(charts)}</div>')


def _quality_section(stats: Mapping) -> str:
    thresholds = stats.get("thresholds") or {}
    quality_all = stats.get("quality_all") or {}
    charts = []
    for name in QUALITY_METRICS:
        accepted = stats["quality"][name]
        series = []
        if name in quality_all:
            series.append(("all decoded", quality_all[name]["histogram"]["counts"],
                           _ALL_DECODED_COLOR))
        series.append(("accepted", accepted["histogram"]["counts"], _ACCEPTED_COLOR))
        svg = _histogram_svg(accepted["histogram"]["edges"], series, thresholds.get(name))
        charts.append(f'<div class="chart"><h3>{_e(name)}</h3>{svg}{_summary_line(accepted)}'
                      f"</div>")
    legend = ('<div class="legend">'
              f'<span style="background:{_ALL_DECODED_COLOR}"></span>all decoded images'
              f'<span style="background:{_ACCEPTED_COLOR}"></span>accepted'
              f'<span style="background:{_THRESHOLD_COLOR}"></span>rejection threshold</div>')
    return ("<h2>Quality metrics</h2>" + legend
            + '<p class="note">Measured on 8-bit luma of the analysis copy. The first and last '
              "bars also hold values beyond the axis ends; n, min, max, mean and std are over "
              "accepted images.</p>"
            + f'<div class="charts">{"".join(charts)}</div>')


def _pixel_section(stats: Mapping) -> str:
    pixel = stats["pixel_stats"]
    rows = [[channel, _number(mean), _number(std)]
            for channel, mean, std in zip(("R", "G", "B"), pixel["mean"], pixel["std"])]
    return ("<h2>Pixel statistics (accepted)</h2>"
            f'<p class="note">Per channel, scale {_e(pixel["scale"])}, weighted by '
            f'{_e(pixel["weighting"])} (each image by its original width × height); use these '
            "to normalize inputs.</p>"
            + _table(["channel", "mean", "std"], rows, numeric=(1, 2)))


def _formats_and_boxes_section(stats: Mapping) -> str:
    formats = sorted(stats["formats"].items(), key=lambda item: (-item[1], item[0]))
    format_rows = [[f"<code>{_e(name)}</code>", _number(count)] for name, count in formats]
    byte_counts = stats["bytes"]
    boxes = stats["boxes"]
    return ("<h2>Formats, bytes and boxes</h2>"
            + _table(["format (accepted)", "images"], format_rows, numeric=(1,))
            + _table(["bytes", "total"],
                     [["discovered", _bytes_text(byte_counts["discovered"])],
                      ["accepted", _bytes_text(byte_counts["accepted"])]], numeric=(1,))
            + _table(["boxes (accepted)", "count"],
                     [["images with boxes", _number(boxes["images_with_boxes"])],
                      ["boxes", _number(boxes["boxes"])]], numeric=(1,)))


def render_report(stats: dict, thumbnails: dict[str, list[tuple[str, bytes | None]]],
                  title: str, run_id: str) -> str:
    """The run's report.html as one self-contained string.

    stats: the dict from `transforms.reporting.stats.finalize_stats` (an unfinalized index summary works
    too: the accounting then checks discovered == accepted + rejected itself). An optional
    stats["thresholds"] = {metric: value} draws each quality threshold on its histogram.
    thumbnails: {reason: [(path, image bytes or None)]}: small PNG (or JPEG) renderings of
    rejected images; None shows a "not decodable" box.
    """
    overall_ok = bool((stats.get("accounting") or {}).get(
        "ok", stats["images"]["discovered"]
        == stats["images"]["accepted"] + stats["images"]["rejected"]))
    body = "".join([
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">run <code>{_e(run_id)}</code> · accounting {_status(overall_ok)}</p>',
        _accounting_section(stats),
        _nightly_section(stats),
        _class_section(stats),
        _reject_section(stats),
        _thumbnail_section(thumbnails),
        _size_section(stats),
        _quality_section(stats),
        _pixel_section(stats),
        _formats_and_boxes_section(stats),
    ])
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{_e(title)} · {_e(run_id)}</title><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>\n")
