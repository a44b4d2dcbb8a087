"""The typed outputs (and inputs) of the preprocessing graph's composites
(`pipelines.preprocess_graph`): named PCollections instead of dicts and positional tuples; Beam tags
a NamedTuple's PCollections by field name."""
from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam

__all__ = ["Inputs", "Inspected", "DedupInputs", "Deduped", "Counted"]


class Inputs(NamedTuple):
    """ReadInputs' outputs (PCollections; None where the run was not given that kind of input:
    no label CSV, no box CSV, no archive)."""
    refs: beam.PCollection               # discovered files (FileRef)
    discovery_rejects: beam.PCollection  # Rejects found while listing
    other_files: beam.PCollection        # the extension key of each listed file that is no image
    label_items: beam.PCollection | None  # every label CSV row, parsed (LabelRow) or a Reject
    label_rows: beam.PCollection | None   # the parsed ones
    label_rejects: beam.PCollection | None  # the rejected ones
    box_items: beam.PCollection | None    # likewise for box CSV rows
    box_rows: beam.PCollection | None
    box_rejects: beam.PCollection | None
    archive_rows: beam.PCollection | None  # the live snapshots' index rows with run_id, removed

    def pvalues(self) -> dict:
        """The PCollections there are, by field name: what a composite is applied to (Beam
        takes no None among a composite's inputs)."""
        return {name: pcoll for name, pcoll in self._asdict().items() if pcoll is not None}

    @classmethod
    def of(cls, pvalues) -> Inputs:
        """The Inputs that `pvalues()` gave (an Inputs itself passes as it is)."""
        if isinstance(pvalues, cls):
            return pvalues
        return cls(**{name: pvalues.get(name) for name in cls._fields})


class Inspected(NamedTuple):
    """InspectAndLabel's outputs (PCollections)."""
    labelled: beam.PCollection          # inspected records with their label and boxes, and
    #                                     those a quality rule rejected (exact dedup still looks
    #                                     at them; they pass class assignment as they are)
    rejected: tuple                     # PCollections of the records rejected so far, but by
    #                                     a quality rule (flattened once, with dedup's)
    row_rejects: beam.PCollection       # PlanImages' CSV row rejects
    skipped: beam.PCollection           # unchanged since the archive: not inspected again
    matched: beam.PCollection           # (row kind, count) of CSV rows matched, per bundle
    kept: beam.PCollection              # the archive's records that stay live
    retired: beam.PCollection           # retirement lines of the archive's records that do not


class Deduped(NamedTuple):
    """Dedup's outputs: unique records, and the PCollections of rejected ones."""
    unique: beam.PCollection
    rejected: tuple


class Counted(NamedTuple):
    """What Accounting counts, besides ReadInputs' and InspectAndLabel's outputs."""
    accepted_parts: beam.PCollection  # IndexParts of the accepted records' index rows
    image_rejects: beam.PCollection   # the images' Rejects
    all_rejects: beam.PCollection     # every Reject (images and CSV rows)


class DedupInputs(NamedTuple):
    records: beam.PCollection            # labelled candidates, and the quality rejects
    archive_accepted: beam.PCollection   # the archive's index rows that stay live
    class_table: beam.PCollection        # classes.ClassTable of the records (a singleton)
