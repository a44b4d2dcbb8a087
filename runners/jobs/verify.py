"""`pixelmill verify`: checks committed snapshots byte by byte against their manifests.

    pixelmill verify OUT [--snapshot RUN_ID] [--s3_endpoint_url URL] [--s3_region_name NAME]

Every committed snapshot of OUT (or the one named): each shard's TFRecord framing and CRCs,
each listed file's size and sha256, each uncompressed shard's DALI index, the manifest's
accounting (`pipelines.verify_snapshot`). Prints one line per broken file,
`<path>: <what is wrong>`, warnings for folders that were never committed, and a summary line.
Exit codes: 0 everything verifies; 1 something is broken; 2 bad usage (no OUT, no such
snapshot).
"""
from __future__ import annotations

import argparse
import sys

from runners.errors import UsageError

__all__ = ["main", "format_findings"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pixelmill verify", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", metavar="OUT", help="the job's --output_dir")
    parser.add_argument("--snapshot", metavar="RUN_ID", help="verify only this snapshot")
    for name, what in (("s3_endpoint_url", "an S3-compatible store's endpoint"),
                       ("s3_region_name", "the bucket's region")):
        parser.add_argument(f"--{name}", metavar=name.split("_")[-1].upper(),
                            help=f"for s3:// OUT: {what}, as the job's flag of that name "
                                 "(else the AWS settings of the environment)")
    return parser


def _exists(output_dir: str) -> bool:
    """Whether OUT is a folder; on an object store (`gs://`, `s3://`: no folders there, so
    `exists` is False for any prefix), whether any object is under it. An `s3://` bucket is
    checked first: a missing bucket or credentials fail here, in one line."""
    from transforms import file_reads, s3_storage
    from transforms.local_paths import is_local
    if is_local(output_dir):
        return file_reads.exists(output_dir)
    if s3_storage.is_s3(output_dir):
        s3_storage.check_bucket(output_dir)
    return bool(file_reads.match(output_dir.rstrip("/") + "/**"))


def format_findings(findings) -> list[str]:
    """The lines `main` prints: broken files, warnings, then the summary."""
    lines = [f"{path}: {'; '.join(problems)}" for path, problems in sorted(
        findings.broken.items())]
    lines += [f"warning: {path}: {problem}" for path, problem in sorted(
        findings.warnings.items())]
    verdict = (f"{len(findings.broken)} broken" if findings.broken else "all verified")
    lines.append(f"pixelmill verify: {len(findings.snapshots)} snapshot(s), {findings.files} "
                 f"files: {verdict}")
    return lines


def main(argv=None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    from pipelines.verify_snapshot import verify_output
    from transforms import s3_storage
    s3_storage.set_options({"s3_endpoint_url": args.s3_endpoint_url,
                            "s3_region_name": args.s3_region_name})
    try:
        if not _exists(args.output_dir):
            raise UsageError(f"OUT {args.output_dir}: no such folder")
    except s3_storage.S3Error as exc:
        raise UsageError(str(exc)) from exc
    try:
        findings = verify_output(args.output_dir, args.snapshot)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    for line in format_findings(findings):
        print(line)
    return 0 if findings.ok else 1


if __name__ == "__main__":
    from runners.cli import console_main
    console_main(["verify", *sys.argv[1:]])
