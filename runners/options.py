"""pixelmill's Beam job options (`PipelineOptions` subclasses), in their own module.

Beam registers every `PipelineOptions` subclass globally and adds all their flags to one
parser; defining a subclass twice (as happens when `python -m runners.jobs.preprocess` runs a
module as `__main__` that is imported again under its own name) is a flag conflict. Defined
here, they exist once whatever the entry point.
"""
from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from runners.flags import add_nightly_flags, add_preprocess_flags, command_help, wants_help

__all__ = ["PreprocessOptions", "NightlyOptions", "JOB_OPTIONS", "wants_help", "print_help"]


def print_help(command: str) -> None:
    """--help for a Beam entry point (`runners.flags.command_help`): pixelmill's own options
    (Beam's parser would list only its own), and a pointer to Beam's."""
    print(command_help(command, f"runners.{command}"), end="")


class PreprocessOptions(PipelineOptions):
    """pixelmill's job options (shown by `pixelmill preprocess --help`)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add_preprocess_flags(parser)


class NightlyOptions(PipelineOptions):
    """Options of `pixelmill nightly` beyond those of `pixelmill preprocess`."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add_nightly_flags(parser)


# The pixelmill option classes each command takes; another command's flags are an error there.
JOB_OPTIONS = {"preprocess": (PreprocessOptions,), "nightly": (PreprocessOptions, NightlyOptions)}
