"""The `pixelmill` command: one subcommand per entry point.

    pixelmill preprocess --data_root DIR --labels CSV --output_dir OUT [Beam options]
    pixelmill nightly --data_root DIR --labels CSV --output_dir OUT [--fail_on_drift]
    pixelmill forget --output_dir OUT (--path P | --sha256 H | --from FILE)
    pixelmill compact --output_dir OUT
    pixelmill demo [--workdir DIR]
    pixelmill preview --output_dir OUT --out grid.png
    pixelmill verify OUT [--snapshot RUN_ID]
    pixelmill bench preprocess|train|quality|scale [options]
    pixelmill --version

Each subcommand is also `python -m runners.<module>`. An argument that is neither a flag of the
command nor (for `preprocess` and `nightly`) a Beam pipeline option is an error, with the
nearest flag as a suggestion.

Exit codes: 0 done; 1 the run failed (the error is printed; nothing was published); 2 bad
flags, config or inputs, found before any work (one line, no traceback); 75 another run holds
the output folder's lock; 4 `preprocess` or `nightly` refused a run that would lose the last
good data (`runners.jobs.guard`: nothing published, --accept_shrink publishes it); `nightly` adds 3
(drift with --fail_on_drift); `verify` exits 1 when a file is broken; 143 / 130 stopped by
SIGTERM / SIGINT (cleaned up: `runners.stop_signals`). Never a signal: the process ends with
`runners.exit_safety.exit_now` whatever happened (see `console_main`). `--help` and `--version`
load neither TensorFlow nor Beam.
"""
from __future__ import annotations

import importlib
import sys
import traceback

from configs.checks import ConfigError
from runners import console, exit_safety, stop_signals
from runners.errors import LockHeld, UsageError
from runners.flags import command_help, wants_help
from runners.jobs.guard import EXIT_REFUSED, ShrinkRefused

__all__ = ["main", "console_main", "SUBCOMMANDS", "EXIT_FAILED", "EXIT_USAGE", "EXIT_LOCKED",
           "EXIT_REFUSED"]

EXIT_FAILED = 1   # the run failed; the error is printed, nothing was published
EXIT_USAGE = 2    # bad flags, config or inputs, found before any work: one line
EXIT_LOCKED = 75  # EX_TEMPFAIL: another run holds the output folder
# EXIT_REFUSED = 4 (runners.jobs.guard): the run would lose the last good data; nothing published

SUBCOMMANDS = {
    "preprocess": ("runners.jobs.preprocess",
                   "raw images + CSV labels -> committed TFRecord snapshot"),
    "nightly": ("runners.jobs.nightly", "incremental rerun: only new data, cross-run dedup, drift"),
    "forget": ("runners.jobs.forget", "retire named images from every read, remove their bytes"),
    "compact": ("runners.jobs.compact", "write the live set as one base snapshot (for any reader)"),
    "demo": ("runners.demo.command", "generate demo data, run the job on it, print the summary"),
    "preview": ("runners.jobs.preview", "PNG grid of augmented training samples with boxes"),
    "verify": ("runners.jobs.verify", "check committed snapshots: framing, CRCs, sha256s, indexes"),
    "bench": (None, "benchmarks: `bench preprocess`, `bench train`, `bench quality` or "
                    "`bench scale`"),
}
_GRAPH_COMMANDS = ("preprocess", "nightly", "demo")  # the commands that build a Beam graph
_BENCHES = {"preprocess": "runners.bench.bench_preprocess", "train": "runners.bench.bench_train",
            "quality": "runners.bench.bench_quality", "scale": "runners.bench.bench_scale"}


def _usage() -> str:
    lines = ["usage: pixelmill <command> [options]", "", "commands:"]
    lines += [f"  {name:<11} {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines += ["", "`pixelmill <command> --help` lists a command's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv, verbose = console.split_verbose(list(sys.argv[1:] if argv is None else argv))
    console.configure_logging(verbose)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from runners.version import version
        print(f"pixelmill {version()}")
        return 0
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
    if command in ("preprocess", "nightly") and wants_help(rest):  # without Beam's import
        print(command_help(command, module_name), end="")
        return 0
    if command not in _GRAPH_COMMANDS:
        return _run(command, importlib.import_module(module_name), rest, verbose)
    if command in _DECODING_COMMANDS and not wants_help(rest) and not any(
            arg.split("=", 1)[0] in _DECODERS_ELSEWHERE for arg in rest):
        _start_decoders_forkserver()
    from transforms.gc_policy import long_lived_imports, thawed_after
    with thawed_after():  # Beam's import, paused collector and frozen (`transforms.gc_policy`)
        with long_lived_imports():
            module = importlib.import_module(module_name)
        return _run(command, module, rest, verbose)


# The commands whose job always runs (a nightly may find nothing new), and the flags that put
# the decoders in other processes than this one (then `prepare_job` decides).
_DECODING_COMMANDS = ("preprocess", "demo")
_DECODERS_ELSEWHERE = ("--runner", "--direct_running_mode")


def _start_decoders_forkserver() -> None:
    """Starts the decoders' forkserver before Beam's import rather than after it: its
    TensorFlow import (~3 s) is what the job's first decode waits for, and it now overlaps
    Beam's import and the graph's build. The default config needs it (isolated decoding, the
    report's thumbnails); `prepare_job` would start the same one later."""
    from transforms.offline import isolation
    isolation.start_forkserver(isolation.DECODER_PRELOAD)


def _run(command: str, module, rest: list, verbose: bool) -> int:
    """The command's entry point, its errors turned into exit codes."""
    entry = getattr(module, "main", None) or module.run
    try:
        result = entry(rest)
    except (UsageError, ConfigError) as exc:
        print(f"pixelmill {command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except LockHeld as exc:
        print(f"pixelmill {command}: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    except ShrinkRefused as exc:
        print(f"pixelmill {command}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as exc:  # noqa: BLE001 - a failed run: the cause, then exit 1
        if stop_signals.received() is not None:  # a library turned the signal into an error
            raise stop_signals.Stopped.by(stop_signals.received()) from exc
        console.report_failure(command, rest, exc, verbose)
        return EXIT_FAILED
    return result if isinstance(result, int) else 0


def console_main(argv=None) -> None:
    """The `pixelmill` console script: `main()`, then a hard exit, whatever happened.

    After a job that ran TensorFlow Transform, CPython's interpreter teardown can crash
    (SIGSEGV in protobuf's upb extension deallocating a repeated field after its module was
    torn down: protobuf 6 with TF 2.21 / TFT 1.21). Everything is written and flushed by then,
    so exiting without the teardown keeps the exit code honest: also when `main` raises
    (exit 1; a failed run exited 139 from the teardown) or is interrupted (130, as a shell
    reports Ctrl-C).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not console.split_verbose(argv)[1] and sys.stderr is sys.__stderr__:  # not captured
        console.quiet_native_output()  # before TensorFlow or a child process starts
    try:
        with stop_signals.handled():
            code = main(argv)
    except stop_signals.Stopped as exc:  # cleaned up on its way here (`locked_run`)
        print(f"pixelmill: stopped by {exc.name}: the run's unpublished files and its lock "
              f"were removed", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("pixelmill: interrupted", file=sys.stderr)
        code = 130
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BaseException:  # noqa: BLE001 - report it, then still skip the teardown
        traceback.print_exc()
        code = EXIT_FAILED
    stop_signals.end_children()
    console.drain()
    exit_safety.exit_now(code)


if __name__ == "__main__":
    console_main()
