"""What the launcher builds from a staged run: statistics, the HTML report, drift.

    stats        index rows -> stats.json (moments: one value's exact moments and histogram)
    stats_proto  stats.json -> TFDV's stats.pb
    feature_stats  the written records' features -> Split-<split>/FeatureStats.pb (TFX layout;
                 feature_stats_proto: one feature's accumulator -> its TFDV proto)
    exact_sums   exact sums of many doubles at once, for stats and feature_stats
    misra_gries  the top-values sketch of feature_stats (tfx_bsl's algorithm, deterministic)
    tfds_metadata  dataset_info.json, features.json, label names: the snapshot as a TFDS dataset
    report       report.html
    thumbnails   small PNGs of rejected images for the report
    drift        tonight against the archive: cumulative totals and drift checks
"""
