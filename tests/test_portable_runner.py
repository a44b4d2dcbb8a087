"""The job on Beam's portable runner gives the same bytes as the default runner.

`PortableRunner` submits the pipeline as a Runner API proto to a job service and runs the steps
in SDK workers, the path Dataflow takes; Beam's Python local job service
(`apache_beam.runners.portability.local_job_service_main`) with `--environment_type LOOPBACK`
(the workers run in this process) is the closest to it that runs offline. Everything binds to
localhost; the service picks a free port and reports it in a port file.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from tests.jobutil import run_job
from tests.tiers import slow_fixture

_START_TIMEOUT_S = 120


@slow_fixture()
def job_endpoint(tmp_path):
    """A local job service (its own process) on localhost: (`localhost:PORT`, its log)."""
    port_file = tmp_path / "job_service.port"
    log_path = tmp_path / "job_service.log"
    log = open(log_path, "w")
    service = subprocess.Popen(
        [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
         "--port", "0", "--port_file", str(port_file)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not port_file.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("The local job service did not start: "
                            + log_path.read_text()[-2000:])
            time.sleep(0.2)
        yield f"localhost:{port_file.read_text().strip()}", log_path
    finally:
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        log.close()


def _files(snapshot) -> dict:
    """Every file of a snapshot: relative path -> sha256 (the manifest without its `created`
    time, and with its own entry's checksums, which cover the other files)."""
    result = {}
    for folder, _, names in os.walk(snapshot.path):
        for name in names:
            path = os.path.join(folder, name)
            data = open(path, "rb").read()
            if name == "manifest.json":
                manifest = json.loads(data)
                manifest.pop("created")
                data = json.dumps(manifest, sort_keys=True).encode()
            result[os.path.relpath(path, snapshot.path)] = hashlib.sha256(data).hexdigest()
    return result


def test_portable_runner_writes_the_same_bytes_as_the_default_runner(demo, job_endpoint,
                                                                      tmp_path):
    endpoint, service_log = job_endpoint
    inputs = dict(labels=[demo.labels_csv], classes=demo.classes_txt, boxes=[demo.boxes_csv])
    portable = run_job(demo.root, tmp_path / "portable", extra=[
        "--run_id", "same", "--runner", "PortableRunner", f"--job_endpoint={endpoint}",
        "--environment_type=LOOPBACK"], **inputs)
    default = run_job(demo.root, tmp_path / "default", extra=["--run_id", "same"], **inputs)
    files = _files(portable)
    assert files == _files(default)
    for expected in ("train/images-train.tfrecord-00000-of-00001", "index.parquet",
                     "rejects.jsonl", "stats.json", "stats.pb", "manifest.json"):
        assert expected in files
    assert portable.accounting["ok"] and portable.accounting == default.accounting
    log = service_log.read_text()
    assert "Running job" in log and "with state DONE" in log  # the service ran it
    assert "Requesting worker at localhost:" in log  # the loopback worker, on localhost
