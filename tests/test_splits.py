"""Split and shard assignment pinned to the documented rule, with values computed by hand.

The rule (transforms/offline/splits.py): the first 16 hex digits of the sha256 read as an
unsigned 64-bit integer over 2**64 choose the split against the cumulative ratios
(train, then validation, then test); hex digits 16..32 modulo the shard count choose the
shard. The literals below were computed once from that rule; a change of rule fails here,
because it would move every existing image to another split or shard."""
from __future__ import annotations

import hashlib
from fractions import Fraction

import pytest

from configs.schema import SplitConfig
from transforms.offline.splits import assign_split, hash_fraction, shard_index

DEFAULT = SplitConfig()  # 0.8 / 0.1 / 0.1
HALVES = SplitConfig(train=0.5, validation=0.25, test=0.25)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# (content, first 16 hex digits of its sha256, hex digits 16..32, split under 0.8/0.1/0.1)
KNOWN = [
    (b"a", "ca978112ca1bbdca", "fac231b39a23dc4d", "train"),          # 0.79137...
    (b"", "e3b0c44298fc1c14", "9afbf4c8996fb924", "validation"),      # 0.88941...
    (b"first image", "fb4516b50946085b", "d15d6807d1526c96", "test"),  # 0.98152...
    (b"b", "3e23e8160039594a", "33894f6564e1b134", "train"),          # 0.24273...
]


@pytest.mark.parametrize("data, head, middle, split", KNOWN)
def test_known_hashes_land_in_their_pinned_split(data, head, middle, split):
    sha = _sha(data)
    assert (sha[:16], sha[16:32]) == (head, middle)
    assert assign_split(sha, DEFAULT) == split


@pytest.mark.parametrize("data", [k[0] for k in KNOWN])
def test_hash_fraction_is_the_first_64_bits_over_2_to_the_64(data):
    sha = _sha(data)
    exact = Fraction(int.from_bytes(hashlib.sha256(data).digest()[:8], "big"), 1 << 64)
    assert hash_fraction(sha) == pytest.approx(float(exact), abs=2 ** -52)


def test_hash_fraction_literals():
    assert hash_fraction("0" * 64) == 0.0
    assert hash_fraction("4" + "0" * 63) == 0.25
    assert hash_fraction("8" + "0" * 63) == 0.5
    assert hash_fraction("c" + "0" * 63) == 0.75
    assert hash_fraction("ca978112ca1bbdca" + "0" * 48) == pytest.approx(0.7913742705223816)
    # digits past the 16th do not move the fraction (they pick the shard)
    assert hash_fraction("8" + "0" * 15 + "f" * 48) == 0.5


@pytest.mark.parametrize("head, split", [
    ("0000000000000000", "train"),
    ("7ff0000000000000", "train"),       # 0.49951171875 < 0.5
    ("8000000000000000", "validation"),  # exactly 0.5: the train interval is half-open
    ("bff0000000000000", "validation"),  # 0.74951171875
    ("c000000000000000", "test"),        # exactly 0.75
    ("fff0000000000000", "test"),
])
def test_boundaries_are_half_open_on_the_cumulative_ratios(head, split):
    assert assign_split(head + "0" * 48, HALVES) == split


def test_a_zero_ratio_split_gets_nothing_in_the_middle():
    no_validation = SplitConfig(train=0.5, validation=0.0, test=0.5)
    assert assign_split("8" + "0" * 63, no_validation) == "test"
    assert assign_split("7ff" + "0" * 61, no_validation) == "train"


def test_an_explicit_split_wins_and_an_unknown_one_is_an_error():
    assert assign_split("0" * 64, DEFAULT, explicit="test") == "test"
    assert assign_split("f" * 64, DEFAULT, explicit="train") == "train"
    with pytest.raises(ValueError, match=r"Unknown split 'dev'\. Expected one of"):
        assign_split("0" * 64, DEFAULT, explicit="dev")


@pytest.mark.parametrize("data, num_shards, shard", [
    (b"a", 8, 5),            # ...dc4d: 0xd = 13, 13 % 8 = 5
    (b"", 8, 4),             # ...b924: 4 % 8
    (b"first image", 2, 0),  # ...6c96: even
    (b"second image", 2, 1),
    (b"third image", 2, 0),
    (b"a", 1, 0),
])
def test_shard_index_literals(data, num_shards, shard):
    sha = _sha(data)
    assert shard_index(sha, num_shards) == shard
    assert shard_index(sha, num_shards) == int(sha[16:32], 16) % num_shards


def test_shard_uses_other_bits_than_the_split():
    """The split digits (0..16) and the tail (32..64) do not move the shard."""
    middle = "0123456789abcdef"  # 0x0123456789abcdef = 81985529216486895; % 7 = 6
    for head in ("0" * 16, "f" * 16, "8" + "0" * 15):
        for tail in ("0" * 32, "f" * 32):
            assert shard_index(head + middle + tail, 7) == 6
