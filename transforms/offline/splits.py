"""Split assignment: the CSV's split column when present, else a deterministic function of the
image's sha256 and the configured ratios (never arrival order, never the path)."""
from __future__ import annotations

from configs.schema import SPLITS, SplitConfig

__all__ = ["SPLITS", "hash_fraction", "assign_split", "shard_index"]


def hash_fraction(sha256: str) -> float:
    """A uniform number in [0, 1) from the first 64 bits of the content hash."""
    return int(sha256[:16], 16) / float(1 << 64)


def assign_split(sha256: str, ratios: SplitConfig, explicit: str | None = None) -> str:
    if explicit is not None:
        if explicit not in SPLITS:
            raise ValueError(f"Unknown split {explicit!r}. Expected one of {SPLITS}.")
        return explicit
    fraction = hash_fraction(sha256)
    if fraction < ratios.train:
        return "train"
    if fraction < ratios.train + ratios.validation:
        return "validation"
    return "test"


def shard_index(sha256: str, num_shards: int) -> int:
    """The shard of a record: independent bits of the hash from those that chose the split."""
    return int(sha256[16:32], 16) % num_shards
