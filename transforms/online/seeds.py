"""Stateless seed derivation for the online half: global seed -> epoch -> step -> replica -> sample.

Every random draw in training derives from `(global_seed, epoch, step, replica, sample)` through
Philox fold-ins and splits (TF's stateless ops with `alg="philox"`), so the same tuple gives the
same numbers on any machine, on CPU and GPU, and after a restart, while different tuples get
independent streams. Nothing here touches a stateful RNG; every function is a pure TF
computation that works in a graph (`epoch`, `step`, `replica` may be scalar tensors). A seed is
an int64 tensor [2], what every `tf.random.stateless_*` op takes. Each level folds its own tag
in before its index, so `epoch_seed(g, 3)` and `step_seed(g, 0, 3)` never coincide.

The draws (`uniform`, `normal`, `fold_in`, `split`) give the same bits as TF's stateless
uniform / normal / fold_in / split with `alg="philox"`, eager, in a graph and under XLA
(tested), in fewer graph ops: TF derives Philox's key and counter in Python-built ops, and an
augmentation setting makes over a hundred draws, so tracing spent much of its time there; here
the scrambled pair is drawn as two uint64s (op counts: docs/benchmarks.md). TF's one-kernel
derivation (`StatelessRandomGetKeyCounter`) is not used: under XLA on the CPU it derives
another key, so compiled and uncompiled batches would differ.

`tf.random.stateless_beta` does not exist: Beta(a, b) is `X / (X + Y)` with `X ~ Gamma(a)`,
`Y ~ Gamma(b)` (`stateless_beta`), each `tf.random.stateless_gamma` bit for bit in a few ops
(its kernel and key derivation, without the broadcasts a unit `beta` does not need). The
gamma kernel has no XLA lowering, so it is sampled outside any `jit_compile` region.
"""
from __future__ import annotations

import weakref
import zlib

import numpy as np
import tensorflow as tf

__all__ = [
    "root_seed",
    "epoch_seed",
    "step_seed",
    "sample_seeds",
    "fold_in_name",
    "stateless_beta",
    "uniform",
    "normal",
    "fold_in",
    "split",
]


# Level tags keep the levels apart ("pxm" + level initial, as int32 constants).
_TAG_ROOT = 0x70786D00
_TAG_EPOCH = 0x70786D65
_TAG_STEP = 0x70786D73
_TAG_REPLICA = 0x70786D72


_PHILOX = 1  # tf.random.Algorithm.PHILOX, as the raw ops take it
_AUTO_SELECT = 3  # tf.random.Algorithm.AUTO_SELECT: what tf.random.stateless_gamma uses
_TINY = np.finfo(np.float32).tiny  # stateless_gamma's floor for draws that round to 0
_SCRAMBLE_KEY = 0x02461E293EC8F720  # the key TF scrambles Philox seeds with


def _philox_key_counter(seed) -> tuple[tf.Tensor, tf.Tensor]:
    """Philox's uint64 key [1] and counter [2] for an int [2] seed, as `alg="philox"` derives
    them: one Philox draw keyed by a constant, counter = the seed's bits; the key is its first
    64-bit word, the counter (0, second word)."""
    words = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=[2], key=tf.constant([_SCRAMBLE_KEY], tf.uint64),
        counter=tf.cast(seed, tf.uint64), alg=_PHILOX, dtype=tf.uint64)
    key, high = tf.split(words, 2)
    return key, tf.concat([tf.zeros([1], tf.uint64), high], 0)


def uniform(shape, seed, minval: float = 0.0, maxval: float = 1.0) -> tf.Tensor:
    """float32 uniform in [minval, maxval): `tf.random.stateless_uniform(shape, seed, minval,
    maxval, alg="philox")`, bit for bit."""
    key, counter = _philox_key_counter(seed)
    draws = tf.raw_ops.StatelessRandomUniformV2(shape=shape, key=key, counter=counter,
                                                alg=_PHILOX, dtype=tf.float32)
    if (minval, maxval) == (0.0, 1.0):
        return draws  # TF's `draws * 1 + 0` changes no bit of a value in [0, 1)
    low, high = np.float32(minval), np.float32(maxval)
    return draws * (high - low) + low


def normal(shape, seed) -> tf.Tensor:
    """float32 standard normal: `tf.random.stateless_normal(shape, seed, alg="philox")` (TF
    then computes `draws * 1 + 0`, which can only turn a -0.0 into 0.0)."""
    key, counter = _philox_key_counter(seed)
    return tf.raw_ops.StatelessRandomNormalV2(shape=shape, key=key, counter=counter,
                                              alg=_PHILOX, dtype=tf.float32)


def fold_in(seed, data) -> tf.Tensor:
    """A new seed from `seed` and an integer: `tf.random.experimental.stateless_fold_in(seed,
    data, alg="philox")`, bit for bit (`data`'s dtype is the seed's): (one draw from `seed`,
    `data`)."""
    data = tf.convert_to_tensor(data)
    return tf.stack([_first_word(seed, data.dtype), data])


def _first_word(seed, dtype) -> tf.Tensor:
    """The draw `fold_in` pairs with its data. It depends on the seed alone, and an
    augmentation folds a dozen names into the same batch seed, so while a graph is traced it
    is drawn once per seed tensor (and dtype) of that graph (fewer ops per augmentation trace:
    docs/benchmarks.md). Each traced function (a `tf.function`, a `tf.data` map, a branch) is
    its own graph with its own entries."""
    def draw():
        key, counter = _philox_key_counter(seed)
        return tf.raw_ops.StatelessRandomUniformFullIntV2(shape=[], key=key, counter=counter,
                                                          alg=_PHILOX, dtype=dtype)
    if tf.executing_eagerly() or not isinstance(seed, tf.Tensor):
        return draw()
    drawn = _FIRST_WORDS.setdefault(tf.compat.v1.get_default_graph(), {})
    seed_ref, word_ref = drawn.get((id(seed), dtype), (None, None))
    word = word_ref() if seed_ref is not None and seed_ref() is seed else None
    if word is None:
        word = draw()
        drawn[(id(seed), dtype)] = (weakref.ref(seed), weakref.ref(word))
    return word


# graph -> {(id(seed), dtype): (seed, word)}, all held weakly: a graph's ops hold its tensors,
# so the entries live exactly as long as the graph they belong to.
_FIRST_WORDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def split(seed, num: int) -> tf.Tensor:
    """[num, 2] new seeds: `tf.random.experimental.stateless_split(seed, num, alg="philox")`,
    bit for bit."""
    seed = tf.convert_to_tensor(seed)
    key, counter = _philox_key_counter(seed)
    return tf.raw_ops.StatelessRandomUniformFullIntV2(shape=[num, 2], key=key, counter=counter,
                                                      alg=_PHILOX, dtype=seed.dtype)


def _fold(seed: tf.Tensor, data) -> tf.Tensor:
    data = tf.constant(data, tf.int64) if isinstance(data, int) else tf.cast(data, tf.int64)
    return fold_in(seed, data)


def root_seed(global_seed) -> tf.Tensor:
    """The int64 [2] seed of the whole run, from one integer (any int64, Python or tensor)."""
    base = tf.constant([_TAG_ROOT, 0], tf.int64)
    return _fold(base, global_seed)


def epoch_seed(global_seed, epoch) -> tf.Tensor:
    """The int64 [2] seed of one epoch (file order, shuffle and everything below it)."""
    return _fold(_fold(root_seed(global_seed), _TAG_EPOCH), epoch)


def step_seed(global_seed, epoch, step, replica=0) -> tf.Tensor:
    """The int64 [2] seed of one batch: (global_seed, epoch, step, replica).

    `step` counts batches within the epoch (or globally; be consistent) and may be a tensor, e.g.
    the index from `Dataset.enumerate()`. `replica` is the `InputContext.input_pipeline_id`, so
    replicas draw independently while a restart on the same replica reproduces its batches.
    """
    seed = _fold(_fold(epoch_seed(global_seed, epoch), _TAG_STEP), step)
    return _fold(_fold(seed, _TAG_REPLICA), replica)


def sample_seeds(batch_seed, batch_size) -> tf.Tensor:
    """int64 [batch_size, 2]: one independent seed per sample of a batch (philox split).

    Row i depends only on (batch_seed, i), not on batch_size, so a smaller last batch gives its
    samples the same seeds; use it for per-sample draws made inside a per-element `map` (e.g. a
    random crop before batching).
    """
    batch_seed = tf.convert_to_tensor(batch_seed, tf.int64)
    return split(batch_seed, batch_size)


def fold_in_name(seed, name: str) -> tf.Tensor:
    """A sub-seed for a named consumer (an augmentation op), stable across config changes.

    The tag is the CRC32 of the name, so enabling or disabling one op never shifts another
    op's draws.
    """
    return _fold(tf.convert_to_tensor(seed, tf.int64), zlib.crc32(name.encode("utf-8")))


def stateless_beta(shape, alpha, beta, seed) -> tf.Tensor:
    """float32 samples of Beta(alpha, beta) from two stateless gammas: X / (X + Y).

    Not XLA-compilable (the stateless gamma kernel has no XLA lowering): call it outside
    `tf.function(jit_compile=True)`. `alpha` and `beta` must be > 0.
    """
    seed = tf.convert_to_tensor(seed, tf.int64)
    seed_x, seed_y = tf.unstack(split(seed, 2), 2)
    x = _gamma(shape, alpha, seed_x)
    y = _gamma(shape, beta, seed_y)
    total = x + y
    # Both gammas underflow to 0 only for tiny alpha; fall back to the mean instead of 0/0.
    mean = tf.cast(alpha / (alpha + beta), tf.float32)
    return tf.where(total > 0, x / tf.where(total > 0, total, 1.0), mean)


def _gamma(shape, alpha, seed) -> tf.Tensor:
    """float32 Gamma(alpha, 1): `tf.random.stateless_gamma(shape, seed, alpha)`, bit for bit
    (the same key derivation, kernel and floor at the smallest normal float; dividing by the
    unit rate changes no bit), in 6 graph ops instead of 34. `alpha` broadcasts to the
    trailing dimensions of `shape`, as there."""
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    draws = tf.raw_ops.StatelessRandomGammaV3(
        shape=shape, key=key, counter=counter, alg=_AUTO_SELECT,
        alpha=tf.convert_to_tensor(alpha, tf.float32))
    return tf.maximum(_TINY, draws)
