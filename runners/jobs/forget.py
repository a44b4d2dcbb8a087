"""`pixelmill forget`: retire named images from every future read and remove their bytes.

    pixelmill forget --output_dir OUT --path cat/img0002.jpg [--path ...]
    pixelmill forget --output_dir OUT --sha256 3f9a...       [--sha256 ...]
    pixelmill forget --output_dir OUT --from takedown.txt    # one path or sha256 a line

Each record found gets one audit line in `OUT/forgotten.jsonl` (path, sha256, the snapshot
it was in, when); `make_dataset` and nightly stop reading it at once, and every shard that
held it is rewritten without it (`pipelines.compaction.forget`). A later run rejects the image
as `forgotten` while its source still exists, unless run with `--allow_forgotten`. Takes the
output folder's lock, as a run does. Exit codes: 0 done, 2 bad flags, 75 the lock is held.
"""
from __future__ import annotations

import argparse
import re
import sys

from runners.errors import UsageError
from runners.flags import CommandParser
from transforms import snapshot_layout as layout

__all__ = ["main", "parse_names"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def parse_names(paths, shas, from_file) -> tuple[list[str], list[str]]:
    """(paths, sha256s) from the flags; a line of `--from` is a sha256 when it is 64 hex
    digits, else a path. Bad sha256s are a UsageError naming them."""
    paths, shas = list(paths or ()), [s.lower() for s in shas or ()]
    if from_file:
        try:
            with open(from_file, encoding="utf-8") as handle:
                lines = [line.strip() for line in handle if line.strip()]
        except OSError as exc:
            raise UsageError(f"--from {from_file}: {exc.strerror}") from exc
        for line in lines:
            if _SHA256.match(line.lower()):
                shas.append(line.lower())
            else:
                paths.append(line)
    bad = [s for s in shas if not _SHA256.match(s)]
    if bad:
        raise UsageError(f"--sha256 must be 64 hex digits. Received: {bad}")
    if not paths and not shas:
        raise UsageError("Name what to forget: --path P, --sha256 H or --from FILE.")
    return paths, shas


def main(argv=None) -> int:
    parser = CommandParser(prog="pixelmill forget", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--sha256", action="append", default=[])
    parser.add_argument("--from", dest="from_file", default=None)
    args = parser.parse_args(argv)
    paths, shas = parse_names(args.path, args.sha256, args.from_file)
    from pipelines.compaction import forget  # TensorFlow: after the flags are checked
    from runners.locking.locked_run import locked_maintenance
    result = locked_maintenance(args.output_dir, lambda _run_id: forget(
        args.output_dir, paths, shas, detail="pixelmill forget"))
    for line in result.lines:
        where = f"snapshot {line['snapshot']}" if line["snapshot"] else "no record (yet)"
        print(f"forgotten: {line['path'] or line['sha256']}  ({where})")
    print(f"pixelmill forget: {len(result.lines)} audit lines in "
          f"{layout.join(args.output_dir, layout.FORGOTTEN)}; "
          f"{len(result.scrubbed)} shards rewritten")
    return 0


if __name__ == "__main__":
    from runners.cli import console_main
    console_main(["forget", *sys.argv[1:]])
