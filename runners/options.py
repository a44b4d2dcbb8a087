"""pixelmill's Beam job options (`PipelineOptions` subclasses), in their own module.

Beam registers every `PipelineOptions` subclass globally and adds all their flags to one
parser; defining a subclass twice (as happens when `python -m runners.preprocess` runs a
module as `__main__` that is imported again under its own name) is a flag conflict. Defined
here, they exist once whatever the entry point.
"""
from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions

from runners.nightly_precheck import DEFAULT_MAX_FILES

__all__ = ["PreprocessOptions", "NightlyOptions", "wants_help", "print_help"]


def wants_help(argv) -> bool:
    return any(arg in ("-h", "--help") for arg in (argv or ()))


def print_help(prog: str, description: str, option_classes) -> None:
    """--help for a Beam entry point: pixelmill's own options (Beam's parser would list only
    its own), and a pointer to Beam's."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`--labels CSV` is accepted for --label_csv. Any Beam pipeline option is "
               "accepted too (--runner, --direct_running_mode, --direct_num_workers, --project, "
               "--region, --temp_location, --setup_file, ...; Dataflow job labels: "
               "--dataflow_labels).")
    for option_class in option_classes:
        option_class._add_argparse_args(parser)
    parser.print_help()


class PreprocessOptions(PipelineOptions):
    """pixelmill's job options (shown by `pixelmill preprocess --help`)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--data_root", action="append", default=None,
                            help="Folder or glob of images, local or gs:// (repeatable).")
        parser.add_argument("--label_csv", action="append", default=None,
                            help="Label CSV (repeatable; `--labels` on the command line). "
                                 "Without it, folder names are labels.")
        parser.add_argument("--boxes", action="append", default=None,
                            help="Bounding-box CSV: path,xmin,ymin,xmax,ymax,label (repeatable).")
        parser.add_argument("--classes", default=None,
                            help="Class table: one name per line, id = line index (freezes it).")
        parser.add_argument("--output_dir", default=None,
                            help="Where snapshots, classes.txt and LATEST live (local or gs://).")
        parser.add_argument("--config", default=None,
                            help="YAML config (default: configs/base.yaml).")
        parser.add_argument("--set", dest="config_overrides", action="append", default=None,
                            metavar="SECTION.KEY=VALUE", help="Override one config value.")
        parser.add_argument("--run_id", default=None,
                            help="Snapshot name (default: UTC timestamp).")
        parser.add_argument("--max_shrink", type=float, default=0.5,
                            help="Refuse a run (exit 4, nothing published; its ledger and "
                                 "report go to OUTPUT/candidates/<run_id>/) that would drop "
                                 "more than this fraction of the live set, or all of it "
                                 "(0 < x <= 1).")
        parser.add_argument("--accept_shrink", action="store_true", default=False,
                            help="Publish a run that --max_shrink (or labels matching no "
                                 "image) would refuse.")
        parser.add_argument("--allow_forgotten", action="store_true", default=False,
                            help="Accept images `pixelmill forget` named (by path or content) "
                                 "again; by default they are rejected as `forgotten`.")


class NightlyOptions(PipelineOptions):
    """Options of `pixelmill nightly` beyond those of `pixelmill preprocess`."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--fail_on_drift", action="store_true", default=False,
                            help="Exit 3 when tonight's data drifted from the archive.")
        parser.add_argument("--lock_stale_hours", type=float, default=12.0,
                            help="Take over a lock whose heartbeat is older than this (its run "
                                 "died; a live run refreshes it every minute).")
        parser.add_argument("--lock_blocked_max", type=int, default=3,
                            help="Exit 1 (an error, not a skip) once the lock has turned away "
                                 "this many runs in a row.")
        parser.add_argument("--always_run_job", action="store_true", default=False,
                            help="Run the whole job even when a quick look at the listing, "
                                 "the CSVs and the archive's index finds nothing new (by "
                                 "default such a night exits 0 without starting the job).")
        parser.add_argument("--quick_look_max_files", type=int, default=DEFAULT_MAX_FILES,
                            help="Skip the quick look when the data roots hold more files "
                                 "than this (it keeps the listing in the launcher's memory, "
                                 "~400 bytes a file; 0: never look).")
