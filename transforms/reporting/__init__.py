"""What the launcher builds from a staged run: statistics, the HTML report, drift.

    stats        index rows -> stats.json
    stats_proto  stats.json -> TFDV's stats.pb
    report       report.html
    thumbnails   small PNGs of rejected images for the report
    drift        tonight against the archive: cumulative totals and drift checks
"""
