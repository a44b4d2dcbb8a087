"""transforms.online.seeds: the stateless (global, epoch, step, replica, sample) seed derivation."""
import itertools

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


def test_stateless_beta_symmetric_small_alpha_is_u_shaped():
    draws = seeds.stateless_beta([4000], 0.2, 0.2, seeds.step_seed(1, 0, 0)).numpy()
    assert np.isfinite(draws).all() and draws.min() >= 0.0 and draws.max() <= 1.0
    assert draws.mean() == pytest.approx(0.5, abs=0.03)
    extremes = np.mean((draws < 0.1) | (draws > 0.9))
    assert extremes > 0.5  # Beta(0.2, 0.2) puts most mass near 0 and 1
