"""The state cache's weights (`runners.state_cache_weights`): Beam's, without walking every
module's globals."""
from __future__ import annotations

import objsize
import pytest
from apache_beam.runners.worker import statecache

from runners import state_cache_weights

BEAM_WEIGH = statecache.get_deep_size  # Beam's own, kept before any install


def _side_input_values():
    """Values shaped like the job's side inputs, built fresh (nothing shared with a module)."""
    return [
        [("cat/" + str(i) + ".jpg", "%064x" % (i * 7919)) for i in range(50)],   # archive hashes
        {f"class_{i}": [i, i * 2, str(i) * 3] for i in range(20)},                # a class table
        [bytes(range(256)) * 4, 3.25, -(2**40), None, True],
        ("train", 1 << 70, ["x" * 1000]),
    ]


def test_beams_own_weighing_is_what_the_cases_compare_with():
    assert BEAM_WEIGH.__module__ == statecache.__name__


@pytest.mark.parametrize("index", range(4))
def test_weights_equal_beams_for_plain_data(index):
    value = _side_input_values()[index]
    assert state_cache_weights.weigh(value) == BEAM_WEIGH(value) > 0


def test_only_a_value_holding_a_modules_globals_weighs_more():
    """Beam leaves a module's globals dict out of a weight; it is counted here (functions,
    types and modules, the usual ways to one, are skipped by Beam's filter either way)."""
    holder = [vars(statecache), "x" * 100]
    assert state_cache_weights.weigh(holder) > BEAM_WEIGH(holder) + 1000
    via_function = [statecache.get_deep_size, statecache.StateCache, statecache, "x" * 100]
    assert state_cache_weights.weigh(via_function) == BEAM_WEIGH(via_function)


def test_weighing_walks_no_module_globals(monkeypatch):
    """The point of it: objsize's module-globals walk (~10 ms per value with TensorFlow
    loaded) is never entered."""
    def walked():
        raise AssertionError("module globals walked")
    monkeypatch.setattr(objsize.traverse, "_iter_modules_globals", walked)
    assert state_cache_weights.weigh(_side_input_values()) > 0
    with pytest.raises(AssertionError, match="module globals walked"):
        BEAM_WEIGH(_side_input_values())


def test_install_makes_the_state_cache_weigh_with_it(monkeypatch):
    monkeypatch.setattr(statecache, "get_deep_size", BEAM_WEIGH)
    monkeypatch.setattr(state_cache_weights, "_installed", False)
    state_cache_weights.install()
    state_cache_weights.install()
    assert statecache.get_deep_size is state_cache_weights.weigh
    cache = statecache.StateCache(10 << 20)
    value = _side_input_values()[0]
    assert cache.get("key", lambda key: value) is value
    assert cache.size() == 1 and cache._current_weight == BEAM_WEIGH(value)
