"""`pixelmill compact`: write the live set as one new base snapshot and make it LATEST.

    pixelmill compact --output_dir OUT

After it, readers that know nothing of pixelmill's retirements (TFDS `builder_from_directory`,
DALI, tfrecord indexes) read exactly the live set from `OUT/snapshots/<LATEST>`; `make_dataset`
reads the same records before and after. Nothing to do (the live view is already one base with
nothing retired): exit 0 and say so. Takes the output folder's lock, as a run does.
"""
from __future__ import annotations

import argparse
import sys

from runners.flags import CommandParser

__all__ = ["main"]


def main(argv=None) -> int:
    parser = CommandParser(prog="pixelmill compact", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    from pipelines.compaction import compact  # TensorFlow: after the flags are parsed
    from runners.locking.locked_run import locked_maintenance
    snapshot = locked_maintenance(args.output_dir, lambda run_id: compact(args.output_dir,
                                                                          run_id))
    if snapshot is None:
        print("pixelmill compact: nothing to do: the live set is one base snapshot already")
        return 0
    print(f"pixelmill compact: snapshot {snapshot.run_id} holds the live set "
          f"({snapshot.accounting['images']['accepted']} records, from "
          f"{len(snapshot.manifest['compacted_from'])} snapshots); LATEST points at it")
    return 0


if __name__ == "__main__":
    from runners.cli import console_main
    console_main(["compact", *sys.argv[1:]])
