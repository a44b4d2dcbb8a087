"""A clean interpreter exit after a job, also when pixelmill is used as a library.

After a job that ran TensorFlow Transform, objects that outlive the job (TFT's
`ExampleProtoCoder` keeps handlers that hold repeated fields of a cached `tf.train.Example`,
reachable until the interpreter tears down) still hold protobuf containers. CPython clears
modules before the last garbage collection, and deallocating a upb repeated-field container
then asks for its module's state, which is gone: SIGSEGV (exit 139) after a run that had
succeeded, in any script that calls `runners.jobs.preprocess.run` and exits normally (gdb:
`PyUpb_RepeatedContainer_Dealloc -> PyUpb_FieldDescriptor_GetDef -> PyModule_GetState(NULL)`).

This module is the one owner of that fix. A process that controls its own end (the
`pixelmill` command, the test suite's pytest process) calls `exit_now`: everything flushed,
then `os._exit`, no teardown. A library user's script cannot: for it `install()` (called by
`runners.beam_runner.prepare_job`) registers an `atexit` hook (atexit runs before the
teardown, with every module alive) that drops the references Python objects' attributes hold
to such containers, so they are freed while it is safe (a `gc.collect()` after the job does
not help: the containers stay reachable).
"""
from __future__ import annotations

import atexit
import gc
import logging
import os
import sys

__all__ = ["install", "release_proto_containers", "exit_now"]

_UPB_MODULE = "google._upb._message"
_installed = False


def install() -> None:
    """Registers `release_proto_containers` to run at interpreter exit (once per process)."""
    global _installed
    if not _installed:
        atexit.register(release_proto_containers)
        _installed = True


def release_proto_containers() -> int:
    """Sets every object attribute that holds a upb container (repeated field or map) to None;
    returns how many. Only for interpreter exit: the objects are unusable afterwards."""
    released = 0
    for holder in gc.get_objects():
        if isinstance(holder, type):
            continue
        try:  # a proxy (werkzeug's LocalProxy, under moto or Flask) raises what it likes
            attributes = getattr(holder, "__dict__", None)
        except Exception:  # noqa: BLE001 - not a plain object: nothing of ours to release
            continue
        if not isinstance(attributes, dict):
            continue
        for name, value in list(attributes.items()):
            kind = type(value)
            if kind.__module__ == _UPB_MODULE and "Container" in kind.__name__:
                attributes[name] = None
                released += 1
    return released


def exit_now(code: int) -> None:
    """Ends the process with `code` without the interpreter teardown: logging shut down and
    stdout/stderr flushed first, so nothing written is lost."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
