"""The `tunehub` commands that talk to a server (submit, status, best, download, workers),
run as processes against the end-to-end service."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.cli_process import run_tunehub
from tests.e2e.conftest import Service, example
from tests.e2e.kernels import run_and_check
from tunehub.schemas.record import TuningStatus
from tunehub.server.standalone import free_port


def tunehub(service: Service | None, *args: str) -> subprocess.CompletedProcess[str]:
    server = ["--server", service.url] if service else []
    return run_tunehub(*args, *server, timeout=240)


def test_submit_watch_best_and_download_through_the_cli(service: Service, tmp_path: Path) -> None:
    sig = example("column_sum")
    done = tunehub(service, "submit", str(sig), "--trials", "4", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    tuning: dict[str, Any] = json.loads(done.stdout)
    assert tuning["status"] == TuningStatus.DONE and tuning["trials_done"] == 4
    key = tuning["workload_key"]

    status = tunehub(service, "status", str(tuning["id"]), "--watch")
    assert status.returncode == 0, status.stderr
    assert "done" in status.stdout and key in status.stdout

    best = tunehub(service, "best", "--signature", str(sig), "--json")
    assert best.returncode == 0, best.stderr
    record = json.loads(best.stdout)
    assert record["id"] == tuning["best"]["id"]
    assert tunehub(service, "best", key).returncode == 0

    out = tmp_path / "kernel"
    download = tunehub(service, "download", key, "-o", str(out))
    assert download.returncode == 0, download.stderr
    assert download.stdout.startswith(f"wrote {out}/")
    run_and_check(out, json.loads(sig.read_text()), {})

    workers = tunehub(service, "workers", "--json")
    assert workers.returncode == 0, workers.stderr
    assert len(json.loads(workers.stdout)) >= 2


def test_cli_errors_are_one_line_with_the_right_exit_code(service: Service) -> None:
    missing = tunehub(service, "status", "999999")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: GET /v1/tunings/999999: HTTP 404: no tuning 999999"
    neither = tunehub(service, "best")
    assert neither.returncode == 2 and "KEY or by --signature" in neither.stderr
    bad = tunehub(service, "submit", str(example("matmul_128")), "--target", "tpu")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown target 'tpu'")
    down = tunehub(None, "status", "1", "--server", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 1 and "cannot reach the tunehub server" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1
