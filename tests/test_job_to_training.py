"""Both halves together: shards made by the offline job feed model.fit, and the loss drops."""
from __future__ import annotations

import os

import keras
import numpy as np

from configs.schema import load_config
from pipelines.training_input import count_examples, make_dataset


def test_model_trains_on_the_offline_jobs_shards(train_snapshot):
    """conftest's train_snapshot: 32 images, all train, gzip shards, no TFT analysis (the
    reader normalizes with stats.json's pixel_stats)."""
    out = train_snapshot.out
    config = load_config(overrides=["online.image_size=32", "online.mix.enabled=false"])
    assert count_examples(out, "train") == 32
    batch = 8
    train = make_dataset(out, "train", batch_size=batch, config=config, seed=1, num_epochs=6,
                         jit_compile=False)
    plain = make_dataset(out, "train", batch_size=32, config=config, augment=False,
                         shuffle=False)
    images, labels = next(iter(plain))
    assert images.shape == (32, 32, 32, 3) and labels.shape == (32, 2)
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0)
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(8, 3, activation="relu",
                            kernel_initializer=keras.initializers.GlorotUniform(seed=0)),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(2, activation="softmax",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.03), loss="categorical_crossentropy")
    before = model.evaluate(plain, verbose=0)
    model.fit(train, epochs=6, steps_per_epoch=32 // batch, verbose=0)
    after = model.evaluate(plain, verbose=0)
    assert after < 0.7 * before, (before, after)
    assert os.path.isdir(os.path.join(out, "snapshots"))
