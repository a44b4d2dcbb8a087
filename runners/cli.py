"""The `pixelmill` command: one subcommand per entry point.

    pixelmill preprocess --data_root DIR --labels CSV --output_dir OUT [Beam options]
    pixelmill nightly --data_root DIR --labels CSV --output_dir OUT [--fail_on_drift]
    pixelmill demo [--workdir DIR]
    pixelmill preview --output_dir OUT --out grid.png
    pixelmill bench preprocess|train [options]

Each subcommand is also `python -m runners.<module>`.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys

from configs.schema import ConfigError
from runners.errors import UsageError
from runners.run_lock import LockHeld

__all__ = ["main", "console_main", "SUBCOMMANDS"]

SUBCOMMANDS = {
    "preprocess": ("runners.preprocess", "raw images + CSV labels -> committed TFRecord snapshot"),
    "nightly": ("runners.nightly", "incremental rerun: only new data, cross-run dedup, drift"),
    "demo": ("runners.demo", "generate demo data, run the job on it, print the summary"),
    "preview": ("runners.preview", "PNG grid of augmented training samples with boxes"),
    "bench": (None, "benchmarks: `bench preprocess` or `bench train`"),
}
_BENCHES = {"preprocess": "runners.bench_preprocess", "train": "runners.bench_train"}


def _usage() -> str:
    lines = ["usage: pixelmill <command> [options]", "", "commands:"]
    lines += [f"  {name:<11} {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines += ["", "`pixelmill <command> --help` lists a command's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("apache_beam.typehints", "apache_beam.runners.worker", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(f"pixelmill: unknown command {command!r}. Expected one of "
              f"{tuple(SUBCOMMANDS)}.\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name = SUBCOMMANDS[command][0]
    if command == "bench":
        if not rest or rest[0] not in _BENCHES:
            print(f"pixelmill bench: expected one of {tuple(_BENCHES)}. Received: {rest[:1]}",
                  file=sys.stderr)
            return 2
        module_name, rest = _BENCHES[rest[0]], rest[1:]
    module = importlib.import_module(module_name)
    entry = getattr(module, "main", None) or module.run
    try:
        result = entry(rest)
    except (UsageError, ConfigError) as exc:
        print(f"pixelmill {command}: error: {exc}", file=sys.stderr)
        return 2
    except LockHeld as exc:
        print(f"pixelmill {command}: {exc}", file=sys.stderr)
        return 75
    return result if isinstance(result, int) else 0


def console_main(argv=None) -> None:
    """The `pixelmill` console script: `main()`, then a hard exit.

    After a job that ran TensorFlow Transform, CPython's interpreter teardown can crash
    (SIGSEGV in protobuf's upb extension deallocating a repeated field after its module was
    torn down: protobuf 6 with TF 2.21 / TFT 1.21). Everything is written and flushed by then,
    so exiting without the teardown keeps the exit code honest.
    """
    code = main(argv)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()
