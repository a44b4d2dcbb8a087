"""SIGTERM and SIGINT stop a `pixelmill` run cleanly: the same way, with the shell's exit code.

Schedulers, containers and `timeout` send SIGTERM, whose default action kills the process at
once: the lock, the staging folder and the decoder processes would stay behind. Inside
`handled()` both signals raise `Stopped` in the main thread instead, a BaseException (as
KeyboardInterrupt is), so that every `finally` and `locked_run`'s cleanup run, while
`except Exception` handlers let it through. The command then ends its child processes
(`end_children`) and exits 128 + the signal number (143, 130).

Beam re-raises an exception from inside a step as `type(exc)(message + step)`: `Stopped` keeps
its type and signal through that. A failure that the signal caused inside a library (caught and
re-raised as another error) is still reported as the signal: `received()` says one arrived.
Further signals while the run cleans up are noted, not raised, so the cleanup finishes.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading

__all__ = ["Stopped", "handled", "received", "raise_if_received", "exit_code", "end_children"]

_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}
_STATE = {"signum": None, "inside": False}


class Stopped(BaseException):
    """The run was stopped by SIGTERM or SIGINT; `signum` says which."""

    def __init__(self, message: str = "SIGTERM"):
        super().__init__(message)
        name = message.split()[0] if message else ""
        self.signum = next((num for num, known in _NAMES.items() if known == name),
                           signal.SIGTERM)

    @classmethod
    def by(cls, signum: int) -> "Stopped":
        return cls(f"{_NAMES[signum]} received")

    @property
    def name(self) -> str:
        return _NAMES[self.signum]

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def exit_code(signum: int) -> int:
    """What a shell reports for a process that a signal stopped: 128 + its number."""
    return 128 + int(signum)


def received() -> int | None:
    """The first SIGTERM/SIGINT number received inside the current `handled()`, or None."""
    return _STATE["signum"]


def raise_if_received() -> None:
    """Raises `Stopped` if a signal arrived inside `handled()`. Its own `Stopped` can be lost:
    Python prints and drops an exception raised inside a weakref callback or `__del__` ("Exception
    ignored in"), and a signal may land there. Called before anything is published, so such a
    run still stops instead of committing. Outside `handled()` (a library call), nothing."""
    if _STATE["inside"] and _STATE["signum"] is not None:
        raise Stopped.by(_STATE["signum"])


def _handle(signum, _frame) -> None:
    if _STATE["signum"] is not None:
        return  # already stopping: let the cleanup finish
    _STATE["signum"] = signum
    raise Stopped.by(signum)


@contextlib.contextmanager
def handled():
    """SIGTERM and SIGINT raise `Stopped` while inside (main thread only); the previous
    handlers come back afterwards."""
    _STATE["signum"] = None
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return
    previous = {signum: signal.signal(signum, _handle) for signum in _NAMES}
    previous_hook = sys.unraisablehook

    def quiet_dropped_stop(unraisable):  # raised again before publishing: no traceback
        if not isinstance(unraisable.exc_value, Stopped):
            previous_hook(unraisable)

    sys.unraisablehook = quiet_dropped_stop
    _STATE["inside"] = True
    try:
        yield
    finally:
        _STATE["inside"], _STATE["signum"] = False, None  # nothing stale for a later caller
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def end_children(timeout_s: float = 5.0) -> None:
    """Ends this process's multiprocessing children (the isolated decoders) and its
    forkserver: the command exits with `os._exit`, which skips multiprocessing's own cleanup,
    and a child still importing TensorFlow would notice its parent's end only seconds later."""
    children = multiprocessing.active_children()
    for child in children:
        child.kill()
    for child in children:
        child.join(timeout_s)
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid:
        forked = _children_of(pid)  # a decoder the server was forking when we stopped
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for child in forked + _children_of(pid):
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        _forget_forkserver(server)


def _forget_forkserver(server) -> None:
    """Leaves the reaped forkserver's state as multiprocessing leaves a dead one's, so a pool
    started later in this process (a library user, a test) starts a new server instead of
    waiting on a pid that is gone."""
    with contextlib.suppress(OSError, TypeError):
        os.close(server._forkserver_alive_fd)
    server._forkserver_alive_fd = None
    server._forkserver_address = None
    server._forkserver_pid = None


def _children_of(pid: int) -> list[int]:
    """The child pids of `pid` (Linux /proc; empty elsewhere)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(text) for text in handle.read().split()]
    except (OSError, ValueError):
        return []
