"""The offline job's steps, in data-flow order (see README "How the job works").

    discover       DiscoverImages: files under the data roots (local or gs://)
    paths          canonical root-relative paths; unsafe paths are rejected
    labels, boxes  label/box CSV rows as pure functions (rows in, LabelRow/Reject out)
    join_labels    PlanImages: CSV rows and the archive joined to the discovered files by path
    inspect_image  InspectImages: each file through image_inspection's ImageInspector (read,
                   sha256, header, decode, validate, quality), inline or in isolating children
    quality        quality metrics, the verdict and the perceptual hash
    quality_rules  the table of quality rules (metric, direction, config key, histogram, reason)
    classes        the append-only class table (class_names: what a class name may be)
    dedup          DropExactDuplicates, DropNearDuplicates
    splits         split assignment from the sha256
    write_shards   WriteShards: deterministic sharded TFRecords (+ index rows, DALI indexes)
    dali_index     the DALI index lines (tfrecord2idx format) of a shard being written
    index_table    index.parquet rows
    index_writer   index.parquet, sorted by path, merged from sorted runs
    outputs        rejects.jsonl (merged from sorted runs) and small JSON outputs
    tft_analysis   AnalyzeAndWriteTransform (tft_totals: its one combine; tft_outputs: output
                   names, summary); tft_graph, tft_assets, tft_write: the transform traced and
                   written outside Beam (in a child when the launcher has no TensorFlow)
    image_record, rejects   the element that flows through the job; the reject vocabulary
"""
