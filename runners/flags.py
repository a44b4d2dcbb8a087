"""pixelmill's own job flags, light to import: the one definition of each flag of `preprocess`
and `nightly`.

`runners.options` adds them to Beam's parser (its `PipelineOptions` subclasses call
`add_preprocess_flags` / `add_nightly_flags`), and `command_help` prints `--help` from them with
the standard library alone, so `pixelmill preprocess --help` needs neither Beam nor TensorFlow.
Durations and counts are checked where they are parsed: a bad value is one line naming the
flag, its allowed range and what was received.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import math

from runners.errors import UsageError

__all__ = ["add_preprocess_flags", "add_nightly_flags", "command_help", "positive_float",
           "count_at_least", "did_you_mean", "wants_help", "CommandParser",
           "DEFAULT_QUICK_LOOK_MAX_FILES", "BEAM_FLAGS_EPILOG"]

DEFAULT_QUICK_LOOK_MAX_FILES = 1_000_000
BEAM_FLAGS_EPILOG = (
    "`--labels CSV` is accepted for --label_csv. Any Beam pipeline option is accepted too\n"
    "(--runner, --direct_running_mode, --direct_num_workers, --project, --region,\n"
    "--temp_location, --setup_file, ...; Dataflow job labels: --dataflow_labels);\n"
    "any other argument is an error (exit 2).")


def wants_help(argv) -> bool:
    """`-h` or `--help` before any `--` (after it, arguments are values)."""
    argv = list(argv or ())
    head = argv[:argv.index("--")] if "--" in argv else argv
    return any(arg in ("-h", "--help") for arg in head)


def did_you_mean(name: str, known) -> str:
    """". Did you mean --x?" for the known flag nearest to `name` ('-' and '_' alike), or ""."""
    known = sorted(set(known))
    guess = [flag for flag in known if flag.replace("-", "_") == name.replace("-", "_")]
    guess = guess or difflib.get_close_matches(name, known, n=1)
    return f". Did you mean {guess[0]}?" if guess else ""


class CommandParser(argparse.ArgumentParser):
    """argparse for pixelmill's commands: no abbreviations (`--out` is not `--output_dir`), and
    a bad command line is one line (UsageError: exit 2) with the nearest flag as a suggestion,
    instead of a usage dump."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)

    def error(self, message):
        raise UsageError(message)

    def parse_args(self, args=None, namespace=None):
        required = [action for action in self._actions if action.required]
        for action in required:  # a typo in a required flag: name the typo, not the flag
            action.required = False
        try:
            _, extras = self.parse_known_args(args, argparse.Namespace())
        finally:
            for action in required:
                action.required = True
        if extras:
            known = [name for action in self._actions for name in action.option_strings]
            arg = extras[0]
            hint = did_you_mean(arg.split("=", 1)[0], known) if arg.startswith("-") else ""
            raise UsageError(f"unrecognized argument {arg!r}{hint}")
        return super().parse_args(args, namespace)


def positive_float(unit: str):
    """An argparse `type`: a finite number > 0 (`unit` names what it counts in the error)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(
                f"must be a number of {unit} > 0. Received: {text!r}")
        return value
    parse.__name__ = f"number of {unit}"
    return parse


def count_at_least(low: int):
    """An argparse `type`: a whole number >= `low`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(
                f"must be a whole number >= {low}. Received: {text!r}")
        return value
    parse.__name__ = f"whole number >= {low}"
    return parse


def add_preprocess_flags(parser) -> None:
    """The flags of `pixelmill preprocess` (and of `nightly`, which adds its own)."""
    parser.add_argument("--data_root", action="append", default=None,
                        help="Folder or glob of images, local, gs:// or s3:// (repeatable).")
    parser.add_argument("--label_csv", action="append", default=None,
                        help="Label CSV (repeatable; `--labels` on the command line). "
                             "Without it, folder names are labels.")
    parser.add_argument("--boxes", action="append", default=None,
                        help="Bounding-box CSV: path,xmin,ymin,xmax,ymax,label (repeatable).")
    parser.add_argument("--classes", default=None,
                        help="Class table: one name per line, id = line index (freezes it).")
    parser.add_argument("--output_dir", default=None,
                        help="Where snapshots, classes.txt and LATEST live (local, gs:// or "
                             "s3://).")
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


def add_nightly_flags(parser) -> None:
    """The flags only `pixelmill nightly` takes."""
    parser.add_argument("--fail_on_drift", action="store_true", default=False,
                        help="Exit 3 when tonight's data drifted from the archive.")
    parser.add_argument("--lock_stale_hours", type=positive_float("hours"), default=12.0,
                        help="Take over a lock whose heartbeat is older than this (its run "
                             "died; a live run refreshes it every minute). > 0.")
    parser.add_argument("--lock_blocked_max", type=count_at_least(1), default=3,
                        help="Exit 1 (an error, not a skip) once the lock has turned away "
                             "this many runs in a row (>= 1).")
    parser.add_argument("--always_run_job", action="store_true", default=False,
                        help="Run the whole job even when a quick look at the listing, "
                             "the CSVs and the archive's index finds nothing new (by "
                             "default such a night exits 0 without starting the job).")
    parser.add_argument("--quick_look_max_files", type=count_at_least(0),
                        default=DEFAULT_QUICK_LOOK_MAX_FILES,
                        help="Skip the quick look when the data roots hold more files "
                             "than this (it keeps the listing in the launcher's memory, "
                             "~400 bytes a file; 0: never look).")


_JOB_FLAGS = {"preprocess": (add_preprocess_flags,),
              "nightly": (add_preprocess_flags, add_nightly_flags)}


def _docstring(module_name: str) -> str:
    """A module's docstring, read from its source without running it (no heavy imports)."""
    spec = importlib.util.find_spec(module_name)
    with open(spec.origin, encoding="utf-8") as handle:
        return ast.get_docstring(ast.parse(handle.read()), clean=False) or ""


def command_help(command: str, module_name: str) -> str:
    """`pixelmill <command> --help` for the Beam commands (`preprocess`, `nightly`): the module
    docstring, pixelmill's own flags, and a pointer to Beam's."""
    parser = argparse.ArgumentParser(
        prog=f"pixelmill {command}", description=_docstring(module_name),
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=BEAM_FLAGS_EPILOG)
    for add in _JOB_FLAGS[command]:
        add(parser)
    return parser.format_help()
