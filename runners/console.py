"""What the `pixelmill` command shows on the console: pixelmill's own lines, unless -v.

By default the libraries' logs (TensorFlow, absl, CUDA probing, Beam, TFT) are kept off the
console: Python log records from outside pixelmill are dropped (`configure_logging`), and the
native lines TensorFlow and its decoder processes write straight to file descriptor 2 (absl's
`I0000 ...`/`E0000 ...` lines, which TF 2.21 prints whatever `TF_CPP_MIN_LOG_LEVEL` says, and
the codecs' own messages) are filtered out by `quiet_native_output`, in the console script
only. What was dropped is kept (the last lines) for the failure log. `-v/--verbose` shows all
of it, with each line's level and logger.

A failure prints one line with its cause first and writes the traceback to a log file in the
output folder (`OUT/.logs/`), named in that line (`report_failure`).
"""
from __future__ import annotations

import collections
import io
import logging
import os
import re
import select
import sys
import tempfile
import threading
import traceback

from runners import progress_report

__all__ = ["split_verbose", "configure_logging", "quiet_native_output", "drain",
           "report_failure", "is_noise", "OWN_LOGGERS", "LOGS_DIR"]

VERBOSE_FLAGS = ("-v", "--verbose")
OWN_LOGGERS = ("runners", "pipelines", "transforms", "configs", "pixelmill", "__main__")
LOGS_DIR = ".logs"
_NOISE = re.compile(
    r"^([IWEF]\d{4} [\d:. ]+\d+ \S+:\d+\]"       # absl / glog C++ lines
    r"|WARNING: All log messages before absl::InitializeLog\(\)"
    r"|To enable the following instructions:"                   # cpu_feature_guard, line 2
    r"|(Corrupt JPEG data|Premature end of JPEG|Unsupported marker type|Invalid SOS)"
    r"|libpng (warning|error):)")
_dropped: collections.deque = collections.deque(maxlen=400)  # for the failure log
_HANDLER_NAME = "pixelmill-console"
_native: dict = {}


def split_verbose(argv: list) -> tuple[list, bool]:
    """(argv without -v/--verbose, whether it was there): a global flag of every command.
    Arguments after `--` (handed on to Beam as they are) are left alone."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head = [arg for arg in argv[:cut] if arg not in VERBOSE_FLAGS]
    return head + argv[cut:], len(head) < cut


def is_noise(line: str) -> bool:
    """Whether `line` is a library's native log line that the default console drops."""
    return bool(_NOISE.match(line))


class _ConsoleFilter(logging.Filter):
    def __init__(self, verbose: bool):
        super().__init__()
        self._verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.name.split(".", 1)[0] in OWN_LOGGERS
        if own or self._verbose:
            progress_report.clear_line()
            return True
        _dropped.append(f"{record.levelname} {record.name}: {record.getMessage()}")
        return False


class _ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else record.levelname.lower() + ": "
        return f"pixelmill: {level}{record.getMessage()}"


def configure_logging(verbose: bool) -> None:
    """One console handler on the root logger: pixelmill's own records at INFO and up as
    `pixelmill: ...` lines; with `verbose`, everyone's, with level and logger name. Also sets
    `TF_CPP_MIN_LOG_LEVEL=3` (unless set, or verbose) before TensorFlow is imported, so that
    this process and the decoder processes it starts inherit it."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(_ConsoleFilter(verbose))
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s") if verbose
                         else _ConsoleFormatter())
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)  # library warnings are log records: filtered like them
    logging.getLogger("absl").setLevel(logging.NOTSET if verbose else logging.ERROR)
    if not verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def quiet_native_output() -> None:
    """Sends file descriptor 2 (what native code and child processes write) through a filter
    that drops `is_noise` lines; Python's `sys.stderr` writes to the real stderr directly.
    For the console script only, before TensorFlow is imported or a child is started."""
    if _native:
        return
    real = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    sys.stderr = io.TextIOWrapper(io.FileIO(real, "w", closefd=False), line_buffering=True,
                                  errors="backslashreplace", write_through=True)
    os.set_blocking(read_end, False)  # every read happens under the lock (see `drain`)
    _native.update(real=real, read=read_end, rest=b"", lock=threading.Lock())
    threading.Thread(target=_forward_loop, name="pixelmill-stderr", daemon=True).start()


def _forward(chunk: bytes) -> None:
    """Writes the complete lines of `chunk` that are not noise (the caller holds the lock)."""
    lines = (_native["rest"] + chunk).split(b"\n")
    _native["rest"] = lines.pop()
    kept = []
    for line in lines:
        text = line.decode("utf-8", "backslashreplace")
        if is_noise(text):
            _dropped.append(text)
        else:
            kept.append(line + b"\n")
    if kept:
        progress_report.clear_line()
        os.write(_native["real"], b"".join(kept))


def _forward_available() -> bool:
    """Reads and forwards what the pipe holds now (the caller holds the lock); False at its
    end (every writer closed)."""
    while True:
        try:
            chunk = os.read(_native["read"], 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        _forward(chunk)


def _forward_loop() -> None:
    while True:
        try:
            select.select([_native["read"]], [], [])
            with _native["lock"]:
                if not _forward_available():
                    return
        except OSError:
            return


def drain() -> None:
    """Forwards what is still in the filter's pipe, before a hard exit. Every read is made
    under the lock, so what the forwarding thread took is written before this runs, and
    nothing waits for output that may never come (a timed wait here cost every command
    0.2 s)."""
    if not _native:
        return
    with _native["lock"]:
        try:
            _forward_available()
        except OSError:
            pass
        if _native["rest"]:
            _forward(b"\n")


def _output_dir(argv: list) -> str | None:
    """The folder a command writes to: --output_dir (or the demo's --workdir)."""
    for flag in ("--output_dir", "--workdir"):
        for index, arg in enumerate(argv):
            if arg == flag and index + 1 < len(argv):
                return argv[index + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def _write_log(command: str, argv: list, exc: BaseException) -> str | None:
    """Writes the traceback (and the libraries' recent dropped lines) to a new log file:
    OUT/.logs/ when the command names a local output folder, else the temp folder. Returns
    its path, or None when no file could be written (a full disk)."""
    from transforms.snapshot_layout import new_run_id
    text = "".join([f"pixelmill {command} {' '.join(argv)}\n\n",
                    *traceback.format_exception(exc),
                    "\nrecent library output (not shown without -v):\n",
                    *(line + "\n" for line in _dropped)])
    output_dir = _output_dir(argv)
    folders = [os.path.join(output_dir, LOGS_DIR)] if output_dir and "://" not in output_dir \
        else []
    folders.append(os.path.join(tempfile.gettempdir(), "pixelmill-logs"))
    for folder in folders:
        path = os.path.join(folder, f"{new_run_id()}-{command}.log")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            return path
        except OSError:
            continue
    return None


def report_failure(command: str, argv: list, exc: BaseException, verbose: bool) -> None:
    """A failed run on stderr: the cause in one line first (naming the log file with the
    traceback), then the traceback only when `verbose` or when no log file could be written."""
    message = str(exc).strip().splitlines()
    cause = f"{type(exc).__name__}: {message[0][:300] if message else ''}".rstrip(": ")
    path = _write_log(command, argv, exc)
    progress_report.clear_line()
    where = f" (traceback in {path})" if path else ""
    print(f"pixelmill {command}: failed: {cause}{where}", file=sys.stderr, flush=True)
    if verbose or path is None:
        traceback.print_exception(exc, file=sys.stderr)
