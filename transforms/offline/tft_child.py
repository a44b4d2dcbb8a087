"""What the transform's writing child runs (`tft_analysis.write_transform_isolated`).

Its own module so that both sides can load it cheaply: the job's launcher pickles a
`TransformWriter` without importing TensorFlow, and the child, a fork of the decoders'
forkserver (TensorFlow loaded), unpickles it and its arguments (`tft_totals.Totals`) without
importing Beam. Neither does the writing (`tft_graph`, `tft_write` for a local output), so the
child's start-up is TFT's own import and the tracing, ~0.65 s of CPU less than with Beam's
import (docs/benchmarks.md, nineteenth round), CPU that the job's decoders share.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

__all__ = ["TransformWriter", "BACKGROUND_NICE"]

# How much lower than the job the child started ahead runs (`os.nice`): its imports and warm-up
# overlap the decoding on the same cores, and the decoders then come first. At 19 rather than 10
# the set-up takes ~1.5% of a decoder's core rather than ~10% and is done in the job's tail,
# when the launcher works alone: the 2,000-photo job's whole command 6.94 -> 6.65 s (means of 7
# runs taking turns; thumbnails -0.08 s, camera photos and 20 images within the noise,
# docs/benchmarks.md, thirty-fourth round).
BACKGROUND_NICE = 19


class TransformWriter:
    """The child's worker (`isolation.ChildPool`): `tft_graph.write_analyzed_transform`. TF
    and TFT are imported in `setup`, beside the forkserver's TensorFlow; given the job's
    `(image_size, exif_orientation)`, `setup` also traces what every write traces.

    `background`: the child is started ahead of the write, beside the job's decoding, so its
    main thread lowers its priority first (`BACKGROUND_NICE`): its ~0.9 s of imports and
    tracing take what the decoders leave rather than half of it (camera corpus: run() -0.13 to
    -0.25 s, docs/benchmarks.md, twenty-second round). The write, which the job waits for,
    runs on a thread started before that, at the job's priority (on Linux a nice value is a
    thread's): on a machine busy with other work a lowered process gets a tenth of a core.
    A child started for a write that its caller waits for keeps the job's priority."""

    def __init__(self, warm_up: tuple | None = None, background: bool = False):
        self._warm_up = warm_up
        self._background = background
        self._writer = None  # a background child's writing thread (`setup`)

    def setup(self) -> None:
        if self._background and hasattr(os, "nice"):
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="pixelmill-transform-write")
            self._writer.submit(int).result()  # its thread exists now, before the nice below
            os.nice(BACKGROUND_NICE)
        from transforms.offline import tft_graph
        if self._warm_up is not None:
            tft_graph.warm_up(*self._warm_up)

    def run(self, arguments: tuple) -> dict:
        from transforms.offline.tft_graph import write_analyzed_transform
        if self._writer is None:
            return write_analyzed_transform(*arguments)
        return self._writer.submit(write_analyzed_transform, *arguments).result()
