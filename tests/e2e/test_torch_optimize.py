"""The example's walk through the service: a model's task set submitted with `tunehub submit`
and tuned by the end-to-end service's workers, then `tunehub.torch.optimize` fetching the
kernels from the server's URL and running them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_process import run_tunehub
from tests.e2e.conftest import Service

torch = pytest.importorskip("torch")

from tests.torch.test_optimize import Small, dynamic  # noqa: E402
from tunehub.frontends import torch_export  # noqa: E402
from tunehub.torch import optimize  # noqa: E402


def test_a_task_set_tuned_by_the_service_runs_in_pytorch(service: Service, tmp_path: Path) -> None:
    model = Small().eval()
    x = torch.randn(8, 64)
    tasks = tmp_path / "tasks.json"
    tasks.write_text(torch_export.export(model, (x,), dynamic()).model_dump_json())
    done = run_tunehub(
        "submit",
        tasks,
        "--server",
        service.url,
        "--trials",
        "16",
        "--symbol",
        "seq=8",
        "--wait",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    fast = optimize(
        model, (x,), service.url, dynamic_shapes=dynamic(), directory=tmp_path, min_speedup=0
    )
    assert [t.tuned for t in fast.report.tasks] == [True, True], str(fast.report)
    with torch.no_grad():
        for seq in (8, 5):
            x = torch.randn(seq, 64)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
    assert [call.stats["kernel"] for call in fast.calls] == [2, 2]
