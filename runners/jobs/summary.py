"""The plain-text summary printed after a run: accounting, accepted per split and class,
rejected per reason, and where the outputs are."""
from __future__ import annotations

from apache_beam.io.filesystems import FileSystems

from configs.schema import SPLITS
from transforms import snapshot_layout as layout
from transforms.offline.file_kinds import OTHER_FILES, describe_other_files
from transforms.snapshot_layout import Snapshot

__all__ = ["format_summary"]


def format_summary(snapshot: Snapshot) -> str:
    stats, accounting = snapshot.stats, snapshot.accounting
    images = accounting["images"]
    lines = [f"pixelmill snapshot {snapshot.run_id}", ""]
    verdict = "OK" if accounting["ok"] else "MISMATCH"
    skipped = (f" + {images['skipped']} unchanged since an earlier snapshot"
               if images.get("skipped") else "")
    lines.append(f"images: {images['discovered']} discovered = {images['accepted']} accepted + "
                 f"{images['rejected']} rejected{skipped}  [{verdict}]")
    other = describe_other_files(stats.get(OTHER_FILES) or {})
    if other:
        lines.append(f"skipped (not images): {other}")
    for kind in ("label_rows", "box_rows"):
        part = accounting[kind]
        if part["total"]:
            lines.append(f"{kind.replace('_', ' ')}: {part['total']} read = {part['matched']} "
                         f"matched + {part['rejected']} rejected")
    live = accounting.get("live")
    if live and (live["before"] or live["retired"]):
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(live["retired_by_reason"].items()))
        lines.append(f"live set: {live['before']} before + {live['added']} added - "
                     f"{live['retired']} retired = {live['after']}"
                     + (f"  (retired: {reasons})" if reasons else ""))
    by_split_class = stats.get("by_split_class", {})
    names = sorted({name for split in by_split_class.values() for name in split})
    if names:
        width = max(len("class"), *(len(n) for n in names))
        lines += ["", "accepted per split and class:",
                  f"  {'class':<{width}} " + " ".join(f"{s:>10}" for s in SPLITS)]
        for name in names:
            counts = [by_split_class.get(s, {}).get(name, 0) for s in SPLITS]
            lines.append(f"  {name:<{width}} " + " ".join(f"{c:>10}" for c in counts))
        totals = [stats.get("by_split", {}).get(s, 0) for s in SPLITS]
        lines.append(f"  {'total':<{width}} " + " ".join(f"{c:>10}" for c in totals))
    by_kind = {kind: reasons for kind, reasons in stats.get("rejects_by_kind", {}).items()
               if reasons}
    if by_kind:
        lines += ["", "rejected per reason:"]
        for kind, reasons in sorted(by_kind.items()):
            for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"  {reason:<18} {count:>6}  ({kind})")
    lines += ["", f"snapshot:  {snapshot.path}",
              f"report:    {FileSystems.join(snapshot.path, layout.REPORT)}",
              f"rejects:   {FileSystems.join(snapshot.path, layout.REJECTS)}",
              f"index:     {FileSystems.join(snapshot.path, layout.INDEX)}"]
    return "\n".join(lines)
