"""A kernel's interface belongs to its workload: three workloads that differ only in unit axes
compile to one artifact, and every path that hands out a kernel (the local database's
`tunehub kernel`, the service's download and dispatch) gives each workload its own shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.api.data import key_of
from tests.cli_process import run_tunehub
from tests.e2e.conftest import Service
from tests.signatures import UNIT_AXES_SHAPES, unit_axes_trio
from tunehub.client import load_kernel
from tunehub.client.errors import ApiError
from tunehub.client.sdk import Client


def _signatures(tmp_path: Path, name: str) -> list[Path]:
    paths = []
    for n, sig in enumerate(unit_axes_trio(name)):
        path = tmp_path / f"trio{n}.json"
        path.write_text(json.dumps(sig))
        paths.append(path)
    return paths


def _check_kernel(out: Path, shape: list[int]) -> str:
    """The kernel in `out` takes x[64] and returns `shape` (x + 1); its artifact's sha256."""
    metadata = json.loads((out / "metadata.json").read_text())
    assert [a["shape"] for a in metadata["args"]] == [[64], shape]
    x = np.arange(64, dtype=np.float32)
    y = load_kernel(out)(x)
    assert y.shape == tuple(shape)
    np.testing.assert_array_equal(y.reshape(64), x + 1)
    sha: str = metadata["artifact_sha256"]
    return sha


def test_local_kernels_of_one_artifact_have_their_workloads_shapes(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tunehub.db'}"
    shas = set()
    signatures = _signatures(tmp_path, "trio_local")
    for n, (sig, shape) in enumerate(zip(signatures, UNIT_AXES_SHAPES, strict=True)):
        # One trial: the naive config, where the three compile to the same bytes.
        done = run_tunehub("tune", sig, "--trials", 1, "--target", "cpu", "--db", db)
        assert done.returncode == 0, done.stderr
        out = tmp_path / f"k{n}"
        done = run_tunehub("kernel", "--signature", sig, "--target", "cpu", "-o", out, "--db", db)
        assert done.returncode == 0, done.stderr
        shas.add(_check_kernel(out, shape))
    assert len(shas) == 1, "the three workloads no longer share their kernel's bytes"


def test_served_kernels_of_one_artifact_have_their_workloads_shapes(
    service: Service, tmp_path: Path
) -> None:
    server = ("--server", service.url)
    signatures = _signatures(tmp_path, "trio_served")
    shas = set()
    for n, (sig, shape) in enumerate(zip(signatures, UNIT_AXES_SHAPES, strict=True)):
        done = run_tunehub("submit", sig, "--trials", 1, "--target", "cpu", "--wait", *server)
        assert done.returncode == 0, done.stderr
        key = key_of(json.loads(sig.read_text()))
        for way in ((), ("--dispatch",)):
            out = tmp_path / f"k{n}{''.join(way)}"
            done = run_tunehub("download", key, *way, "-o", out, *server)
            assert done.returncode == 0, done.stderr
            shas.add(_check_kernel(out / "k0" if way else out, shape))
    (sha,) = shas  # one artifact: else the three no longer share their kernel's bytes
    with Client(service.url) as hub, pytest.raises(ApiError) as refused:
        hub.artifact(sha)
    assert refused.value.status_code == 409
    assert "workloads with different argument shapes" in refused.value.detail
    done = run_tunehub("download", sha, "-o", tmp_path / "by-sha", *server)
    assert done.returncode == 2 and "download by its workload key" in done.stderr
