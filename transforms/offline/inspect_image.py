"""The job's inspect step: each planned file through an `ImageInspector`
(`transforms.offline.image_inspection`: read, hash, header, limits, decode, quality), in the
Beam worker or, by default, in isolating child processes with a per-file timeout, so that a
decoder that crashes or hangs rejects that one file as `decoder_crash` instead of taking the
job down. The outcome counters are kept here, by the DoFn that sees the results.
"""
from __future__ import annotations

import collections

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from configs.schema import Config
from transforms.offline import isolation, progress
from transforms.offline.beam_steps import LeanDoFn
from transforms.offline.image_inspection import HELD_PER_CHILD, ImageInspector, decoding_pool
from transforms.offline.image_record import ImageRecord
from transforms.offline.rejects import REASONS

__all__ = ["InspectImageFn", "IsolatedInspectFn", "InspectImages", "crash_record"]


_NOT_DECODED = REASONS.not_decoded


class _Tally:
    """Beam counters per outcome (`inspected`, `inspected_ok`, `rejected`, `rejected_<reason>`,
    `decoded`) and the same counts in this process's `progress` (the launcher's progress line),
    kept by the DoFn that sees the results: the worker, also when the decoding runs in a child
    process whose counters Beam would never collect."""

    def __init__(self, limits):
        self._max_pixels = limits.max_pixels
        self._counters = {}
        self._pending = collections.Counter()

    def _inc(self, name: str):
        self._pending[name] += 1

    def flush(self):
        """Adds the counts since the last flush to the Beam counters: once per bundle, as Beam
        commits them, since each `inc` looks up the step's metrics container (~5 us)."""
        for name, count in self._pending.items():
            counter = self._counters.get(name)
            if counter is None:
                counter = self._counters[name] = Metrics.counter("pixelmill", name)
            counter.inc(count)
        self._pending.clear()

    def _decoded(self, record: ImageRecord) -> bool:
        if record.reject is None:
            return True
        if record.reject.reason == "too_large":  # from the header, or a side after decoding
            return record.width * record.height <= self._max_pixels
        return record.reject.reason not in _NOT_DECODED

    def add(self, record: ImageRecord):
        progress.enter("inspecting")
        if self._decoded(record):
            self._inc("decoded")
        self._inc("inspected")
        self._inc("rejected_" + record.reject.reason if record.reject else "inspected_ok")
        if record.reject:
            self._inc("rejected")
        progress.add("inspected")
        progress.add("rejected" if record.reject else "accepted")


class InspectImageFn(LeanDoFn):
    """An `ImageInspector` in the Beam worker, with the outcome counters (`_Tally`). An error
    the inspection raises rejects its file as `decoder_crash` (`crash_record`), caught here
    rather than by Beam's `with_exception_handling`, whose second output cost the job a
    Flatten: one more stage of Beam's local runner (~5 ms of every run)."""

    def __init__(self, inspector: ImageInspector):
        self._inspector = inspector

    def setup(self):
        self._inspector.setup()
        self._tally = _Tally(self._inspector.config.limits)

    def process(self, planned: ImageRecord):
        try:
            record = self._inspector.inspect(planned)
        except Exception as exc:  # any error of one file rejects that file
            yield crash_record(planned, exc)
            return
        self._tally.add(record)
        yield record

    def finish_bundle(self):
        self._tally.flush()


def crash_record(record: ImageRecord, exc: Exception) -> ImageRecord:
    """`record` rejected as `decoder_crash` by the error its inspection raised: the error's
    type and `repr` (500 characters at most)."""
    return record.rejected("decoder_crash", f"{type(exc).__name__}: {repr(exc)[:500]}")


def _failure_record(record: ImageRecord, failure: isolation.Failure) -> ImageRecord:
    return record.rejected("decoder_crash", failure.detail)


BURST = 64  # results `IsolatedInspectFn` holds before it lets them go on, at least


class IsolatedInspectFn(LeanDoFn):
    """An `ImageInspector` in `processes` child processes (`isolation.ChildPool`) with a per-file
    timeout: a file on which a child dies is retried once in a fresh child and then rejected
    as `decoder_crash`; a file that takes longer than `decode.timeout_s` is rejected at once
    (not retried: it would hang again). Elements are buffered (two of the pool's batches per
    child) so the children always have work and a batch of images travels per message (up to
    64, fewer for large files but four while the queue is long: `image_inspection.decoding_pool`);
    results leave in the order they complete, in their own element's window. The pool is
    polled once per batch of elements put (and whenever it is full), not after each one: a
    poll is a `select` and the children's timeout check, ~12 us of the launcher's CPU, and a
    child takes a batch at a time anyway. Results leave in bursts of `BURST` (the rest at the
    bundle's end): the steps after this one run over many records in a row while their code
    is in the CPU's caches, not over the few of one message (a few camera photos) on a cache
    the decoders have just used."""

    def __init__(self, inspector: ImageInspector, timeout_s: float, processes: int):
        self._inspector = inspector  # pickled into each child
        self._timeout_s = timeout_s
        self._processes = processes

    def setup(self):
        self._tally = _Tally(self._inspector.config.limits)
        self._pool = decoding_pool(self._inspector, self._processes, self._timeout_s)
        self._waiting: dict = {}
        self._next_key = 0
        self._unpolled = 0  # elements put since the last poll
        self._done: list = []

    def _emit(self, done, last: bool = False):
        """Holds `done` until `BURST` results (or the `last`) are held, then yields them all."""
        self._done += done
        if len(self._done) < BURST and not last:
            return
        done, self._done = self._done, []
        for key, result in done:
            record, timestamp, window = self._waiting.pop(key)
            if isinstance(result, isolation.Failure):
                result = _failure_record(record, result)
            self._tally.add(result)
            yield WindowedValue(result, timestamp, [window])

    def process(self, planned: ImageRecord, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam):
        key, self._next_key = self._next_key, self._next_key + 1
        self._waiting[key] = (planned, timestamp, window)
        self._pool.put(key, planned, planned.file_bytes)
        self._unpolled += 1
        full = self._pool.in_flight >= 2 * self._processes * HELD_PER_CHILD
        if full or self._unpolled >= self._pool.batch:
            self._unpolled = 0
            yield from self._emit(self._pool.poll(wait=full))

    def finish_bundle(self):
        while self._pool.in_flight:
            yield from self._emit(self._pool.poll(wait=True))
        yield from self._emit([], last=True)
        self._tally.flush()

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()


class InspectImages(beam.PTransform):
    """Planned ImageRecords -> inspected ImageRecords. With `decode.isolation: subprocess` each
    worker inspects in `decode.processes` child processes (`IsolatedInspectFn`; the launcher
    resolves 0, auto, before the graph is built) with a per-file timeout; otherwise in the
    worker itself."""

    def __init__(self, config: Config):
        super().__init__()
        self._config = config

    def expand(self, refs):
        inspector = ImageInspector(self._config)
        if self._config.decode.isolation == "subprocess":  # every failure is caught per file
            return refs | "Inspect" >> beam.ParDo(IsolatedInspectFn(
                inspector, self._config.decode.timeout_s,
                max(1, self._config.decode.processes)))
        return refs | "Inspect" >> beam.ParDo(InspectImageFn(inspector))
