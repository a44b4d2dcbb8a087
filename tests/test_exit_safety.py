"""A script that runs the whole job (TFT included) as a library and then simply ends must exit
0: no SIGSEGV (139) from protobuf containers freed during interpreter teardown
(runners/exit_safety.py)."""
from __future__ import annotations

import json

from runners import exit_safety


def test_a_script_that_ran_the_job_exits_0(script_job):
    """conftest's script_job: the whole job with its defaults (TFT on), then the script ends."""
    done = script_job
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["accepted"] == 6
    assert done.snapshot_dir is not None and (done.snapshot_dir / "manifest.json").exists()


def test_release_drops_attributes_holding_repeated_fields():
    import tensorflow as tf

    class Holder:
        pass

    holder = Holder()
    example = tf.train.Example()
    holder.values = example.features.feature["x"].float_list.value
    holder.other = [1, 2]
    assert exit_safety.release_proto_containers() >= 1
    assert holder.values is None and holder.other == [1, 2]


def test_release_goes_past_objects_whose_dict_raises():
    """A proxy whose `__dict__` raises (werkzeug's LocalProxy outside an app context raises
    RuntimeError at every interpreter exit under moto) is skipped; holders after it are still
    released, and the exit prints no traceback."""
    import tensorflow as tf

    class Proxy:
        @property
        def __dict__(self):
            raise RuntimeError("Working outside of application context.")

    class Holder:
        pass

    proxies = [Proxy() for _ in range(3)]
    holder = Holder()
    holder.values = tf.train.Example().features.feature["y"].float_list.value
    assert exit_safety.release_proto_containers() >= 1
    assert holder.values is None and len(proxies) == 3
