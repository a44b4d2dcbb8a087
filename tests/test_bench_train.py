"""The train benchmark's corpus: a committed snapshot in the layout the reader reads."""
from __future__ import annotations

import numpy as np

from configs.schema import load_config
from pipelines import training_input
from runners.bench.bench_train import write_corpus


def test_corpus_is_a_snapshot_the_reader_reads(tmp_path):
    root = str(tmp_path)
    write_corpus(root, images=6, image_size=20, num_classes=3, num_shards=2, seed=0)
    (snapshot,) = training_input.select_snapshots(root)
    assert snapshot.run_id == "bench"
    assert [f.rsplit("/", 1)[-1] for f in training_input.list_shards(snapshot, "train")] == [
        "images-train.tfrecord-00000-of-00002", "images-train.tfrecord-00001-of-00002"]
    assert training_input.count_examples(root, "train") == 6
    dataset = training_input.make_dataset(
        root, batch_size=6, config=load_config(overrides=["online.image_size=16"]),
        augment=False, shuffle=False, normalize=False)
    (images, labels), = list(dataset)
    assert images.shape == (6, 16, 16, 3)
    # shard 0 holds images 0, 2, 4 and shard 1 images 1, 3, 5; read one from each in turn
    assert np.argmax(labels, axis=1).tolist() == [0, 1, 2, 0, 1, 2]
