"""`transforms.local_paths`: which paths Beam's FileSystems would call local, and `join`, which
joins as FileSystems.join does without importing Beam for a local path (the writing children)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from apache_beam.io.filesystems import FileSystems

from transforms.local_paths import is_local, join

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("path,local", [
    ("/tmp/out", True), ("relative/out", True), ("gs://bucket/out", False),
    ("s3://bucket/out", False), ("  gs://bucket/out", False), ("c:/not/a/scheme", True)])
def test_is_local_is_what_beams_file_systems_would_pick(path, local):
    assert is_local(path) is local


@pytest.mark.parametrize("path,parts", [
    ("/tmp/out", ("train", "images.tfrecord")), ("/tmp/out/", ("a",)),
    ("gs://bucket/out", ("train", "x.tfrecord")), ("s3://bucket/out/", ("a", "b"))])
def test_join_is_beams_join(path, parts):
    assert join(path, *parts) == FileSystems.join(path, *parts)


@pytest.mark.slow
def test_a_local_join_imports_no_beam():
    code = ("import sys\nfrom transforms.local_paths import join\n"
            "print(join('/tmp/out', 'a', 'b'), 'apache_beam' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.stdout.split() == ["/tmp/out/a/b", "False"], done.stderr[-2000:]
