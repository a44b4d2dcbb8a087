"""What one run of the offline job works on (`PreprocessJob`), apart from the graph that does
the work: the runners resolve it, and nightly's quick look (`runners.jobs.nightly_precheck`) reads
it, without importing TensorFlow or building a pipeline."""
from __future__ import annotations

import dataclasses

from configs.schema import Config

__all__ = ["PreprocessJob"]


@dataclasses.dataclass(frozen=True)
class PreprocessJob:
    """Everything the graph needs, resolved and validated by the runner before it is built."""
    data_roots: tuple
    label_csvs: tuple
    box_csvs: tuple
    class_table: tuple          # the table this run starts from (ids of these names are fixed)
    frozen_classes: bool
    staging_dir: str
    config: Config
    archive: tuple = ()         # (run_id, index.parquet path) of the live snapshots (nightly)
    removed: frozenset = frozenset()  # their removed records (live_view.removal_key)
    forgotten_paths: frozenset = frozenset()  # `pixelmill forget`: never brought back unless
    forgotten_shas: frozenset = frozenset()   # --allow_forgotten (then both are empty)
    shuffle_lanes: int | None = None  # the joins' and the near search's shuffles in this many
                                      # lanes (gather.GroupByKeyInLanes); None: key by key

    @property
    def folder_labels(self) -> bool:
        """Labels come from `<root>/<class>/<image>` when no label CSV is given."""
        return not self.label_csvs and self.config.labels.folder_labels

    @property
    def joins_by_path(self) -> bool:
        """Whether planning has anything to join a discovered file with by path: CSV rows or
        the archive's index rows (`join_labels.PlanImages(joined=...)`; without them each file
        is planned alone). An input joined by path that is added to the job belongs here."""
        return bool(self.label_csvs or self.box_csvs or self.archive)
