"""The steps of pixelmill, in the two halves that share one contract.

    transforms/codec.py     the record contract (tf.train.Example keys, encode, parse): both halves
    transforms/decode.py    the one image decoder: offline validation and online training alike;
                            the model's decode (DCT scale, resize) for training and serving
    transforms/snapshot_layout.py   the output folder's layout (names, shard pattern, Snapshot,
                            committed/latest/selected snapshots): the job writes, the reader reads
    transforms/offline/     the preprocessing job's Beam steps and the pure rules they apply
    transforms/reporting/   what the launcher builds after the graph: stats, report, drift
    transforms/online/      the training input's seeded batch augmentation (tf ops)
"""
