"""Guard the last good data: a run that would lose most of the live set is not published.

Before a `preprocess` or `nightly` run commits, its live count after the run (a full run: its
accepted images, since a new base replaces everything; a night: what stays live plus what it
adds) is compared with the live count before it (`transforms.live_view.live_count`). The run
is refused when the live set would fall to zero or by more than `--max_shrink` of it, or when
label CSVs had rows and none matched an image. A refused run commits nothing: its ledger and
report go to `OUTPUT/candidates/<run_id>/` (`pipelines.snapshot.publish_candidate`), LATEST,
classes.txt and the live view stay, and the command exits `EXIT_REFUSED`. `--accept_shrink`
publishes it anyway.
"""
from __future__ import annotations

from typing import NamedTuple

from runners.errors import UsageError
from runners.stop_signals import raise_if_received
from transforms.offline import progress

__all__ = ["EXIT_REFUSED", "DEFAULT_MAX_SHRINK", "Verdict", "ShrinkRefused", "decide",
           "live_after", "check_max_shrink", "refusal_line", "guarded_publish"]

EXIT_REFUSED = 4          # the run would lose the last good data: nothing was published
DEFAULT_MAX_SHRINK = 0.5  # refuse a run that drops more than half of the live set


class Verdict(NamedTuple):
    """`refused` with the reason (one phrase, "" when published), the live counts compared
    and which rule refused it ("shrink", "labels" or "")."""
    refused: bool
    reason: str
    before: int
    after: int
    rule: str = ""


class ShrinkRefused(RuntimeError):
    """A run was refused by the guard; the message is the one line the command prints."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str, verdict: Verdict, candidate: str):
        super().__init__(message)
        self.verdict = verdict
        self.candidate = candidate


def check_max_shrink(value: float) -> float:
    """`value`, or UsageError naming the flag and its allowed range."""
    if not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise UsageError(f"--max_shrink must be in (0, 1] (the largest fraction of the live set "
                         f"a run may drop). Received: --max_shrink {value!r}")
    return float(value)


def live_after(accounting: dict, base: bool) -> int:
    """The live count after a run: a base replaces the live set with its accepted images; a
    night keeps what it did not retire and adds what it accepted."""
    if base:
        return int(accounting["images"]["accepted"])
    return int(accounting["live"]["after"])


def decide(before: int, after: int, label_rows_total: int, label_rows_matched: int,
           max_shrink: float = DEFAULT_MAX_SHRINK, accept_shrink: bool = False) -> Verdict:
    """Whether a run that takes the live set from `before` to `after` images is refused. Pure.

    Refused (unless `accept_shrink`): labels were given and had rows but none matched an
    image; or there was live data (`before > 0`) and it would fall to zero or below
    `before * (1 - max_shrink)`."""
    if accept_shrink:
        return Verdict(False, "", before, after)
    if label_rows_total > 0 and label_rows_matched == 0:
        return Verdict(True, f"the labels match no image ({label_rows_total} label rows, none "
                             f"matched an image)", before, after, "labels")
    if before > 0 and (after == 0 or after < before * (1.0 - max_shrink)):
        return Verdict(True, f"the live set would fall from {before} to {after} images (more "
                             f"than --max_shrink {max_shrink:g})", before, after, "shrink")
    return Verdict(False, "", before, after)


def refusal_line(verdict: Verdict, candidate: str) -> str:
    """The one line a refused run prints (after `pixelmill <command>: `)."""
    return (f"refused: {verdict.reason}; nothing published; ledger and report in "
            f"{candidate}/ (--accept_shrink publishes it)")


def guarded_publish(job, output_dir: str, run_id: str, inputs: dict, before: int,
                    max_shrink: float, accept_shrink: bool, **publish_kwargs):
    """(committed Snapshot, None), or (None, ShrinkRefused) once the refused run's ledger and
    report are in `candidates/<run_id>/`: the caller raises it after leaving the lock, so a
    refusal is not logged as a failed run. `publish_kwargs` go to `publish_snapshot`."""
    from pipelines.snapshot import publish_candidate, publish_snapshot, staged_accounting
    raise_if_received()  # a stop whose exception Python dropped (see the function)
    progress.enter("publishing")
    accounting = staged_accounting(job)
    labels = accounting["label_rows"]
    verdict = decide(before, live_after(accounting, base=not job.archive), labels["total"],
                     labels["matched"], max_shrink, accept_shrink)
    if not verdict.refused:
        return publish_snapshot(job, output_dir, run_id, inputs, **publish_kwargs), None
    why = {"rule": verdict.rule, "reason": verdict.reason, "before": verdict.before,
           "after": verdict.after, "max_shrink": max_shrink}
    candidate = publish_candidate(job, output_dir, run_id, inputs, why, **publish_kwargs)
    return None, ShrinkRefused(refusal_line(verdict, candidate), verdict, candidate)
