"""Strict command lines for the Beam commands: every argument is a flag of the command or a Beam
pipeline option, or the command stops before any work (UsageError, exit 2).

Beam's `PipelineOptions` discards what no registered options class parses, with a warning in
the log, so `--lables labels.csv` would run a job with folder labels. Here the command line is
parsed as Beam parses it (every registered `PipelineOptions` subclass, no abbreviations), minus
the pixelmill options of other commands, and what is left over is an error with the nearest
flag as a suggestion (difflib over pixelmill's and Beam's flags, as the user spells them).
"""
from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

from runners.errors import UsageError
from runners.flags import did_you_mean
from runners.options import JOB_OPTIONS

__all__ = ["check_flags"]

# What the command line calls the flags that `preprocess.translate_flags` renames for Beam.
_SPELLED = {"--label_csv": "--labels", "--labels": "--dataflow_labels"}


class _Parser(_BeamArgumentParser):
    """Beam's parser, with a bad value as a UsageError instead of a usage dump and exit."""

    def error(self, message):
        raise UsageError(message)


def _flag_names(option_classes) -> list[str]:
    parser = _Parser(allow_abbrev=False, add_help=False)
    for option_class in option_classes:
        option_class._add_argparse_args(parser)  # pylint: disable=protected-access
    return [name for action in parser._actions  # pylint: disable=protected-access
            for name in action.option_strings]


def _problem(arg: str, command: str, known: list[str]) -> str:
    if not arg.startswith("-"):
        return (f"unexpected argument {arg!r}: `pixelmill {command}` takes only flags "
                f"(--name value or --name=value)")
    name = arg.split("=", 1)[0]
    for other, classes in JOB_OPTIONS.items():
        if other != command and name in _flag_names(classes):
            return (f"{_SPELLED.get(name, name)} is a flag of `pixelmill {other}`; "
                    f"`pixelmill {command}` does not take it")
    hint = did_you_mean(name, [_SPELLED.get(flag, flag) for flag in known])
    return (f"unknown flag {name}: neither a `pixelmill {command}` flag nor a Beam pipeline "
            f"option{hint}")


def check_flags(argv, command: str) -> None:
    """Raises UsageError naming the first argument of `argv` (already translated by
    `preprocess.translate_flags`) that neither `command`'s options nor a Beam pipeline option
    parses, or the first bad value; returns None when every argument parses."""
    own = JOB_OPTIONS[command]
    foreign = {cls for classes in JOB_OPTIONS.values() for cls in classes} - set(own)
    classes = {}
    for option_class in PipelineOptions.__subclasses__():  # what Beam itself parses with
        if option_class not in foreign:
            classes.setdefault(str(option_class), option_class)
    parser = _Parser(allow_abbrev=False, add_help=False)
    for option_class in classes.values():
        option_class._add_argparse_args(parser)  # pylint: disable=protected-access
    _, unknown = parser.parse_known_args(list(argv))
    if unknown:
        known = [name for action in parser._actions  # pylint: disable=protected-access
                 for name in action.option_strings]
        raise UsageError(_problem(unknown[0], command, known))
