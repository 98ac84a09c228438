"""Check CUDA candidates of a program against the reference, without the tuning service.

For `tunehub check` and the tests: each config is lowered, built (nvcc for the GPU, g++ with
the emulation header for the CPU), and run once through the same sandboxed runner and
verification as a tuning's measurements, on the workload's cached test case. Results keep
their status and log; nothing is stored.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tunehub.compiler.canonical import workload_key
from tunehub.compiler.errors import InvalidConfig
from tunehub.compiler.ir import Program
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.lower import lower
from tunehub.compiler.space.space import Config
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.emulate.emulator import EmulatedBuilder
from tunehub.targets.cuda.emulated import EmulatedRunner
from tunehub.targets.cuda.runner import CudaRunner
from tunehub.worker import device
from tunehub.worker.build.builder import BuildResult
from tunehub.worker.measure.case import CaseCache


@dataclass(frozen=True)
class Checked:
    """One candidate's outcome. `status` is a record status; `log` says why it failed."""

    config: Config
    status: RecordStatus
    log: str = ""
    max_error: float | None = None
    build_s: float | None = None
    run_s: float | None = None


def check_configs(
    program: Program,
    target: Target,
    configs: Sequence[Config],
    symbols: dict[str, int],
    *,
    emulate: bool,
    seed: int = 0,
    build_timeout_s: float = 300.0,
    run_timeout_s: float = 300.0,
    cases: CaseCache | None = None,
) -> list[Checked]:
    """Build and verify `program` under each of `configs` on `target` at `symbols`."""
    lowered: list[Kernel | Checked] = [_lower(program, target, c) for c in configs]
    kernels = [k for k in lowered if isinstance(k, Kernel)]
    built = iter(_build(kernels, target, build_timeout_s, emulate))
    case = (cases or CaseCache()).get(program, workload_key(program), symbols, seed)
    runner = EmulatedRunner() if emulate else CudaRunner()
    results: list[Checked] = []
    try:
        for config, kernel in zip(configs, lowered, strict=True):
            if isinstance(kernel, Checked):
                results.append(kernel)
                continue
            build = next(built)
            if build.artifact is None:
                results.append(Checked(config, build.status, build.log, None, build.build_time_s))
                continue
            start = time.perf_counter()
            measured = runner.run(
                build.artifact,
                kernel.metadata(),
                case,
                timeout_s=run_timeout_s,
                repeats=1,
                min_repeat_s=0.0,
            )
            results.append(
                Checked(
                    config,
                    measured.status,
                    measured.log,
                    measured.max_error,
                    build.build_time_s,
                    time.perf_counter() - start,
                )
            )
    finally:
        runner.close()
    return results


def _lower(program: Program, target: Target, config: Config) -> Kernel | Checked:
    try:
        return lower(program, target, config)
    except InvalidConfig as exc:
        return Checked(config, RecordStatus.INVALID_CONFIG, str(exc))
    except Exception:
        log = f"lowering failed:\n{traceback.format_exc()}"
        return Checked(config, RecordStatus.COMPILE_ERROR, log)


def _build(
    kernels: list[Kernel], target: Target, timeout_s: float, emulate: bool
) -> list[BuildResult]:
    """nvcc batches candidates in one call; g++ builds them in parallel, one per core."""
    if not emulate:
        return CudaBuilder().build_many(kernels, target, timeout_s)
    builder = EmulatedBuilder()
    with ThreadPoolExecutor(max_workers=device.cpu_cores()) as pool:
        return list(pool.map(lambda k: builder.build(k, target, timeout_s), kernels))
