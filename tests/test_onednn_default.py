"""The reader with TensorFlow's default oneDNN graph rewrites on, as a user's process runs it.

The suite's own TensorFlow runs with them off (`tests/conftest.py`: they cost half of each
tf.data function's instantiation); here a fresh interpreter with `TF_ENABLE_ONEDNN_OPTS=1`
reads one epoch of a snapshot with boxes, with every augmentation section on (the warp, colour,
blur, JPEG and noise ops, mixup/cutmix), and its batches must equal this process's.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from configs.schema import load_config
from pipelines import training_input
from tests.fake_snapshot import write_synthetic_snapshot

OVERRIDES = ["online.image_size=16", "online.enable_rate=1.0", "online.mix.probability=1.0",
             "online.geometry.crop_probability=1.0", "online.pixel.blur_probability=1.0",
             "online.pixel.jpeg_probability=1.0", "online.pixel.gaussian_noise_std=0.1"]

# The other interpreter reads with this module's own `_read_here` (conftest is not loaded there).
_READ = ("import sys; import numpy as np; from tests.test_onednn_default import _read_here; "
         "np.savez(sys.argv[2], **_read_here(sys.argv[1]))")


def _read_here(root: str) -> dict:
    config = load_config(overrides=OVERRIDES)
    batches = training_input.make_dataset(root, batch_size=3, config=config, seed=5,
                                          with_boxes=True, max_boxes=3, jit_compile=False)
    return {f"{step}/{name}": value.numpy() for step, batch in enumerate(batches)
            for name, value in batch.items()}


@pytest.mark.slow
def test_the_batches_with_onednn_on_equal_the_suites(tmp_path):
    root = str(tmp_path / "snapshot")
    write_synthetic_snapshot(root, counts={"train": 8}, image_size=24, num_classes=3,
                             num_shards=2, max_boxes=3, seed=4)
    saved = str(tmp_path / "onednn_on.npz")
    done = subprocess.run([sys.executable, "-c", _READ, root, saved],
                          env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1"}, capture_output=True,
                          text=True, timeout=600, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "oneDNN custom operations are on" in done.stderr  # the rewrites did run there
    here = _read_here(root)
    with np.load(saved) as there:
        # 8 images in batches of 3, the partial one dropped: 2 steps of 6 fields
        assert sorted(there.files) == sorted(here) and len(here) == 2 * 6
        for name, value in here.items():
            np.testing.assert_array_equal(there[name], value, err_msg=name)
    assert np.ptp(here["0/images"]) > 0.5 and (here["0/labels"] < 1.0).any()  # mixed
