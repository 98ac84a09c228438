"""Task set versions: 2 lists the ops that need no kernel; a version 1 document (without that
list) is still read, and one that claims version 1 with such a list is refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.signatures import AXPY
from tunehub.schemas.taskset import TaskSet

NO_KERNEL = {"op": "aten.t.default", "reason": "a view", "count": 1, "names": ["t"], "flops": 0}


def document(version: int, **fields: Any) -> dict[str, Any]:
    task = {"signature": AXPY, "weight": 2, "flops": 128}
    flops = {"at": {"N": 64}, "covered": 256, "total": 256}
    return {"version": version, "source": "test", "symbols": AXPY["symbols"], "tasks": [task],
            "flops": flops, **fields}  # fmt: skip


def test_version_1_is_read_and_version_2_is_written() -> None:
    old = TaskSet.model_validate(document(1))
    assert old.version == 1 and old.no_kernel == []
    new = TaskSet.model_validate(document(2, no_kernel=[NO_KERNEL]))
    assert new.no_kernel[0].names == ["t"]
    assert (
        TaskSet.model_validate({k: v for k, v in document(2).items() if k != "version"}).version
        == 2
    )


def test_version_1_with_a_no_kernel_list_is_refused() -> None:
    with pytest.raises(ValidationError, match="no_kernel is a field of task set version 2"):
        TaskSet.model_validate(document(1, no_kernel=[NO_KERNEL]))
