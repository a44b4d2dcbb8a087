"""transforms.online.seeds: the stateless (global, epoch, step, replica, sample) seed derivation."""
import gc
import itertools
import weakref
import zlib

import numpy as np
import pytest
import tensorflow as tf

from transforms.online import seeds


def test_step_seed_is_an_int64_pair_and_repeats_exactly():
    first = seeds.step_seed(7, epoch=2, step=11, replica=1)
    again = seeds.step_seed(7, epoch=2, step=11, replica=1)
    assert first.dtype == tf.int64 and first.shape == (2,)
    np.testing.assert_array_equal(first.numpy(), again.numpy())


def test_every_level_changes_the_step_seed():
    grid = [seeds.step_seed(g, e, s, r).numpy().tobytes()
            for g, e, s, r in itertools.product((0, 1), (0, 1), (0, 1, 2), (0, 1))]
    assert len(set(grid)) == len(grid)


def test_levels_do_not_collide_with_each_other():
    epoch_three = seeds.epoch_seed(5, 3).numpy()
    step_three = seeds.step_seed(5, 0, 3).numpy()
    root = seeds.root_seed(5).numpy()
    assert not np.array_equal(epoch_three, step_three)
    assert not np.array_equal(root, seeds.epoch_seed(5, 0).numpy())


def test_step_seed_in_a_graph_equals_eager_with_tensor_step():
    @tf.function
    def graph_seed(step):
        return seeds.step_seed(3, tf.constant(1, tf.int64), step, replica=2)

    np.testing.assert_array_equal(graph_seed(tf.constant(9, tf.int64)).numpy(),
                                  seeds.step_seed(3, 1, 9, 2).numpy())


def test_large_global_seed_is_accepted_and_distinct():
    big = seeds.root_seed(2 ** 62 + 1).numpy()
    other = seeds.root_seed(1).numpy()
    assert not np.array_equal(big, other)


def test_sample_seeds_are_distinct_and_independent_of_batch_size():
    batch_seed = seeds.step_seed(1, 0, 0)
    six = seeds.sample_seeds(batch_seed, 6).numpy()
    four = seeds.sample_seeds(batch_seed, 4).numpy()
    assert six.shape == (6, 2) and six.dtype == np.int64
    assert len({row.tobytes() for row in six}) == 6
    np.testing.assert_array_equal(six[:4], four)


def test_fold_in_name_is_stable_and_name_specific():
    seed = seeds.step_seed(0, 0, 0)
    np.testing.assert_array_equal(seeds.fold_in_name(seed, "geometry").numpy(),
                                  seeds.fold_in_name(seed, "geometry").numpy())
    assert not np.array_equal(seeds.fold_in_name(seed, "geometry").numpy(),
                              seeds.fold_in_name(seed, "mix").numpy())


def test_stateless_beta_is_deterministic_in_range_and_has_the_right_mean():
    seed = seeds.step_seed(0, 0, 0)
    draws = seeds.stateless_beta([4000], 2.0, 6.0, seed).numpy()
    np.testing.assert_array_equal(draws, seeds.stateless_beta([4000], 2.0, 6.0, seed).numpy())
    assert draws.dtype == np.float32
    assert draws.min() > 0.0 and draws.max() < 1.0
    assert draws.mean() == pytest.approx(2.0 / 8.0, abs=0.01)


@pytest.mark.parametrize("graph", [False, True])
def test_stateless_beta_uses_tfs_stateless_gammas_bit_for_bit(graph):
    """The gammas are drawn with TF's kernel and key derivation in fewer ops; the Beta must
    stay X / (X + Y) of `tf.random.stateless_gamma` exactly (every Mixup/CutMix lambda)."""
    seed = seeds.step_seed(5, 1, 2)

    def ours():
        return seeds.stateless_beta([500], 0.05, 2.0, seed)

    def tfs():
        seed_x, seed_y = tf.unstack(seeds.split(seed, 2))
        x = tf.random.stateless_gamma([500], seed=seed_x, alpha=0.05)
        y = tf.random.stateless_gamma([500], seed=seed_y, alpha=2.0)
        total = x + y
        return tf.where(total > 0, x / tf.where(total > 0, total, 1.0), 0.05 / 2.05)

    if graph:
        ours = tf.function(ours, autograph=False)
    np.testing.assert_array_equal(ours().numpy(), tfs().numpy())


def test_stateless_beta_symmetric_small_alpha_is_u_shaped():
    draws = seeds.stateless_beta([4000], 0.2, 0.2, seeds.step_seed(1, 0, 0)).numpy()
    assert np.isfinite(draws).all() and draws.min() >= 0.0 and draws.max() <= 1.0
    assert draws.mean() == pytest.approx(0.5, abs=0.03)
    extremes = np.mean((draws < 0.1) | (draws > 0.9))
    assert extremes > 0.5  # Beta(0.2, 0.2) puts most mass near 0 and 1


def _philox_draws(uniform, normal, fold_in, split):
    """Every kind of draw the online half makes, from a spread of seeds (negative and large
    ones included), with shapes static and known only when the graph runs."""
    out = []
    for index, seed in enumerate([(0, 0), (1, 2), (-3, 7), (2**62, -(2**61)), (123456789, 5)]):
        seed = tf.constant(seed, tf.int64)
        size = tf.constant(index + 3)
        out += [uniform([4, 3], seed), uniform(tf.reshape(size, [1]), seed),
                uniform([2, 2, 2, 2], seed, -1.0, 1.0), uniform([], seed, 0.25, 0.75),
                normal([2, 5], seed), fold_in(seed, tf.constant(index * 1000 - 7, tf.int64)),
                split(seed, 4)]
    return out


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_draws_are_tfs_philox_draws_bit_for_bit(mode):
    """`uniform`, `normal`, `fold_in` and `split` derive Philox's key and counter in fewer ops
    than TF's `alg="philox"` functions; the bits must not move (they are every augmentation's
    numbers), compiled or not."""
    def ours():
        return _philox_draws(seeds.uniform, seeds.normal, seeds.fold_in, seeds.split)

    def tfs():
        return _philox_draws(
            lambda shape, seed, low=0.0, high=1.0: tf.random.stateless_uniform(
                shape, seed, minval=low, maxval=high, alg="philox"),
            lambda shape, seed: tf.random.stateless_normal(shape, seed, alg="philox"),
            lambda seed, data: tf.random.experimental.stateless_fold_in(seed, data, alg="philox"),
            lambda seed, num: tf.random.experimental.stateless_split(seed, num, alg="philox"))

    if mode != "eager":
        ours = tf.function(ours, autograph=False, jit_compile=mode == "xla")
    expected = tfs()
    got = ours()
    assert len(got) == len(expected) == 35
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_names_folded_into_one_seed_in_a_graph_are_tfs_fold_ins():
    """Ten names folded into one seed inside a traced function (as an augmentation folds a
    dozen per batch) give TF's own `stateless_fold_in` of each name's CRC32, as eagerly."""
    names = [f"op{i}" for i in range(10)]

    def folded(seed):
        return tf.stack([seeds.fold_in_name(seed, name) for name in names])

    seed = tf.constant([5, -9], tf.int64)
    expected = np.stack([tf.random.experimental.stateless_fold_in(
        seed, np.int64(zlib.crc32(name.encode())), alg="philox").numpy() for name in names])
    np.testing.assert_array_equal(tf.function(folded, autograph=False)(seed).numpy(), expected)
    np.testing.assert_array_equal(folded(seed).numpy(), expected)


def test_each_graph_draws_its_own_and_none_is_kept_alive():
    seed = tf.constant([1, 2], tf.int64)
    inner = tf.function(lambda s: seeds.fold_in_name(s, "a"), autograph=False)

    @tf.function(autograph=False)
    def outer(s):
        return seeds.fold_in_name(s, "a"), inner(s), inner(s + 1)

    first, second, third = outer(seed)
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    np.testing.assert_array_equal(third.numpy(), seeds.fold_in_name(seed + 1, "a").numpy())
    functions = [tf.function(lambda s: seeds.fold_in_name(s, "b"), autograph=False)
                 .get_concrete_function(tf.TensorSpec([2], tf.int64)) for _ in range(3)]
    graphs = [weakref.ref(function.graph) for function in functions]
    assert all(graph() is not None for graph in graphs)
    del functions
    gc.collect()
    assert all(graph() is None for graph in graphs)
