"""What the TFT transform is analyzed from: one combine over the accepted records.

`tft_analysis.TotalsFn` folds the raw features of every accepted record (`raw_features`) into
`Totals`: rows, measured rows, pixels, the per-channel pixel-weighted sums and square sums,
rows per label, and rows per width and per height. From them come the transform's constants:

* `vector`: float64 [9] = images, measured images, pixel count, 3 channel sums, 3 square
  sums; the sums are exact and rounded once, so they do not depend on how a runner splits and
  merges the work (TFT's `tft.sum` added float64 batch sums in whatever order Beam batched).
  On inputs whose float64 sum is exact anyway (the demo and bench corpora) they are TFT's bits.
* `quantiles`: float32 [2, num_buckets - 1], width then height boundaries, from the
  `tfx_bsl` sketch `tft.quantiles` uses, fed every value (sorted) in one call.
* `label_counts`: for the class-frequencies asset.

`Totals.analyzed` turns them into the numbers the transform bakes in (`Analyzed`: counts, the
float32 mean and std it normalizes with, the quantiles), once, here: the graph uses them as
they are and stats.json reports the same values without loading the transform back.

The job's Beam graph used to hand every record to TFT, which encoded it as a tf.Example, ran a
saved model over the batches and packed six analyzers; one combine here does the same sums
for a fraction of the graph and the per-record cost (docs/benchmarks.md, seventh round).

No Beam here (the combine is `tft_analysis.TotalsFn`): the transform's writing child unpickles
`Totals` and imports no Beam (`tft_child`).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Mapping

import numpy as np
import pyarrow as pa

from transforms.reporting.exact_sums import ExactSum

__all__ = ["Totals", "Analyzed", "VECTOR_SIZE", "quantile_boundaries", "PIXEL_COUNT",
           "CHANNEL_SUM", "CHANNEL_SQSUM", "WIDTH", "HEIGHT"]

# The analysis-only raw features (`tft_graph.RAW_FEATURE_SPEC`, which imports them).
PIXEL_COUNT = "analysis/pixel_count"      # int64: original width * height (0: not measured)
CHANNEL_SUM = "analysis/channel_sum"      # float32 [3]: pixel_count * mean of pixel/255
CHANNEL_SQSUM = "analysis/channel_sqsum"  # float32 [3]: pixel_count * mean of (pixel/255)**2
WIDTH = "analysis/width"                  # int64
HEIGHT = "analysis/height"                # int64
VECTOR_SIZE = 9
# tft.quantiles' sketch: error bound epsilon for up to 2**32 values, one stream.
_QUANTILE_EPSILON = 0.001
_MAX_VALUES = 1 << 32


@dataclasses.dataclass(frozen=True)
class Analyzed:
    """The transform's analyzed constants (`Totals.analyzed`)."""
    counts: np.ndarray     # int64 [3]: images, measured images, pixel count
    mean: np.ndarray       # float32 [3]: per-channel pixel mean on the 0-1 scale
    std: np.ndarray        # float32 [3]: per-channel pixel std; 1 where it is 0
    quantiles: np.ndarray  # float32 [2, num_buckets - 1]: width, height boundaries


@dataclasses.dataclass
class Totals:
    """The accumulator and the result of `tft_analysis.TotalsFn`, which merges them."""
    images: int = 0
    measured: int = 0
    pixels: int = 0
    sums: list = dataclasses.field(default_factory=lambda: [ExactSum() for _ in range(3)])
    square_sums: list = dataclasses.field(default_factory=lambda: [ExactSum() for _ in range(3)])
    label_counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    widths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    heights: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def vector(self) -> np.ndarray:
        """float64 [VECTOR_SIZE]: see the module docstring."""
        exact = [float(s.value()) for s in (*self.sums, *self.square_sums)]
        return np.asarray([self.images, self.measured, self.pixels, *exact], np.float64)

    def quantiles(self, num_buckets: int) -> np.ndarray:
        """float32 [2, num_buckets - 1]: width and height boundaries."""
        return np.stack([quantile_boundaries(self.widths, num_buckets),
                         quantile_boundaries(self.heights, num_buckets)])

    def analyzed(self, num_buckets: int) -> Analyzed:
        """The constants of the transform, in the float64 arithmetic and float32 rounding
        the transform's graph used when it computed them itself (divide with 0 for no pixel,
        a variance clipped at 0, a std of 0 replaced by 1), so they are its bits."""
        vector = self.vector()
        pixels, sums, square_sums = vector[2], vector[3:6], vector[6:9]
        if pixels:
            mean = sums / pixels
            std = np.sqrt(np.maximum(square_sums / pixels - mean * mean, 0.0))
        else:
            mean = std = np.zeros(3, np.float64)
        return Analyzed(counts=vector[:3].astype(np.int64), mean=mean.astype(np.float32),
                        std=np.where(std > 0.0, std, 1.0).astype(np.float32),
                        quantiles=self.quantiles(num_buckets))


def quantile_boundaries(counts: Mapping[int, int], num_buckets: int) -> np.ndarray:
    """float32 [num_buckets - 1]: `tft.quantiles(x, num_buckets, 0.001)` of the values that
    `counts` holds ({value: rows}), from the same `tfx_bsl` sketch; zeros when empty, as TFT."""
    from tfx_bsl import sketches
    if not counts:
        return np.zeros([num_buckets - 1], np.float32)
    values = sorted(counts)
    flat = np.repeat(np.asarray(values, np.float32), [counts[v] for v in values])
    sketch = sketches.QuantilesSketch(_QUANTILE_EPSILON, _MAX_VALUES, 1)
    sketch.AddValues(pa.array(flat))
    boundaries = np.asarray(sketch.GetQuantiles(num_buckets).to_pylist(), np.float32)
    return boundaries[0, 1:-1]
