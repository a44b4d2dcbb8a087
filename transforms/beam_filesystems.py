"""Beam's FileSystems, imported on first use, with the options a parent process handed over.

A decoding child (`transforms.offline.isolation`) gets its parent's FileSystems options pickled
(`apply_options_on_first_use`); unpickling them imports Beam, so they are applied only when
Beam's FileSystems or their settings are first used (`beam_filesystems`: `file_reads` for a path
that is not local, `s3_storage` for the S3 settings). A child that reads only local files never
imports Beam.
"""
from __future__ import annotations

import pickle

__all__ = ["apply_options_on_first_use", "beam_filesystems", "filesystem_options"]

_PENDING_OPTIONS: list = []  # pickled options for Beam's FileSystems, not applied yet


def apply_options_on_first_use(pickled_options: bytes) -> None:
    """For a child process: Beam's FileSystems options, pickled by the parent, to apply when
    Beam's FileSystems are first used."""
    _PENDING_OPTIONS[:] = [pickled_options]


def beam_filesystems():
    """Beam's FileSystems, with options a parent handed over applied first: every use of Beam's
    FileSystems or of their settings goes through here."""
    from apache_beam.io.filesystems import FileSystems
    if _PENDING_OPTIONS:
        FileSystems.set_options(pickle.loads(_PENDING_OPTIONS.pop()))
    return FileSystems


def filesystem_options():
    """The options Beam's FileSystems use in this process: a Pipeline's, or a worker's runtime
    options (None when Beam has neither)."""
    from apache_beam.options.value_provider import RuntimeValueProvider
    return beam_filesystems()._pipeline_options or RuntimeValueProvider.runtime_options
