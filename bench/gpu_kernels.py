"""GPU kernels tuned by tunehub against cuBLAS, Triton and torch, side by side in one run.

    python bench/gpu_kernels.py                  # every workload, 64 trials each
    python bench/gpu_kernels.py --quick          # 16 trials: 4096^3 GEMM, int4 M=1 and 2048 (inline
                                                 # and MLC forms), rows
    python bench/gpu_kernels.py --only gemm_fp16_4096 int4_gemv_m1 --trials 128

Workloads: fp16 GEMM 4096^3 and 8192^3 (fp32 accumulation; `bench/gemm_fp16_*.json`) against
torch.matmul (cuBLAS) and a Triton autotuned matmul (`bench/triton_matmul.py`; left out with
a note where triton is missing); the int4-dequantizing NT matmul + bias + residual
(`examples/int4_matmul.json`, N = K = 4096, M = 1 and 2048; `bench/int4_matmul_8192.json`,
N = K = 8192, M = 1; the same 4096 linear in MLC-LLM's five blocks, `bench/int4_matmul_mlc.json`,
M = 1 and 2048, which should tune to the inline form's kernels) against torch dequantizing then
multiplying, a Triton int4 GEMV/GEMM on
the signature's own layout (`bench/triton_int4.py`, left out where triton is missing; torch's
tinygemm `_weight_int4pack_mm` takes bfloat16 activations on CUDA, so it cannot run this float16
workload), and against the read floor:
one streaming pass over as many bytes as the workload moves (a cupy kernel; left out where
cupy is missing): what reading those bytes once costs at that size, fixed costs included;
and beside fp16 cuBLAS on the same shape with the weights dequantized beforehand (the GEMM
an int4 kernel should come near); softmax, layernorm and rmsnorm over 4096 rows of 4096
floats (`bench/*_rows.json`) against torch.softmax, torch.nn.functional.layer_norm and
rms_norm. The report ends with issue 14's bars, each where both sides were measured.

Each workload is first tuned from scratch on this GPU (`server.tuner.Tuner` with a
`LocalExecutor` on a temporary SQLite database, the default strategy), its best kernel
exported as `tunehub kernel` would and loaded back with `client.load_kernel`; only then does
this process touch the GPU. Every implementation is timed the same way: CUDA events around
each call, the L2 cache flushed before it, the median of `--repeats` calls after warm-up, on
one stream (the tuned kernel through a bound launch, `CudaKernel.bind`, so Python checks stay
out of the timing). Every output is checked against torch's (relative L2 error). Bandwidth is
quoted against a device-to-device copy measured in the same run (bytes read plus written).
Results go to docs/benchmarks/gpu_kernels-<date>.md and .json.

On the lent GPU machine (python3 there has numpy, torch, triton, cupy and cuda-bindings but
not the service stack), carry what `scripts/gpu_bundle` gathers here (device tool, carry
[".whl", ".gpuenv"], timeout 600; commit as `git rev-parse --short HEAD` gives it here, since
the copy there has no git history):

    bash scripts/gpu_checks <COMMIT> bench     # $OUT/bench.log and the report

and copy $OUT's gpu_kernels-<date>.md/.json into docs/benchmarks/. A full run may outlast one
command's 10 minutes: split it with --only (each part writes its own report).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine, git_commit  # noqa: E402
from tunehub.targets.cuda import device  # noqa: E402

BENCH = ROOT / "bench"
EXAMPLES = ROOT / "examples"
QUICK_TRIALS, TRIALS = 16, 64
# Relative L2 error against torch above which an output counts as wrong.
TOLERANCE = {"float16": 1e-2, "float32": 1e-4}
COPY_BYTES = 1 << 30
READ_FLOOR = "read floor (same bytes)"
TUNED, CUBLAS, TRITON = "tunehub (tuned)", "cuBLAS (torch.matmul)", "Triton (autotuned)"
CUBLAS_FP16 = "cuBLAS fp16 (weights dequantized beforehand)"  # the same GEMM, no int4
INT4_PEERS = ("torch dequantize + matmul", "Triton int4 (autotuned)")
# The bars of issue 14 (a GPU session checks them): the tuned kernel's speed relative to each.
GEMM_BARS = {CUBLAS: 0.95, TRITON: 1.0}
ROW_BAR = 1.0  # against torch's own row kernel
FLOOR_BAR = 0.9  # the GEMV against the read floor
INT4_GEMM_BAR = 1 / 1.15  # the int4 GEMM against fp16 cuBLAS on the same shape


@dataclass(frozen=True)
class Workload:
    name: str
    signature: Path
    symbols: dict[str, int]
    kind: str  # "gemm", "int4", "softmax", "layernorm" or "rmsnorm": its baselines
    quick: bool  # part of --quick


WORKLOADS = [
    Workload("gemm_fp16_4096", BENCH / "gemm_fp16_4096.json", {}, "gemm", True),
    Workload("gemm_fp16_8192", BENCH / "gemm_fp16_8192.json", {}, "gemm", False),
    Workload("int4_gemv_m1", EXAMPLES / "int4_matmul.json", {"M": 1}, "int4", True),
    Workload("int4_gemm_m2048", EXAMPLES / "int4_matmul.json", {"M": 2048}, "int4", True),
    Workload("int4_gemv_8192_m1", BENCH / "int4_matmul_8192.json", {"M": 1}, "int4", False),
    Workload("int4_gemv_mlc_m1", BENCH / "int4_matmul_mlc.json", {"M": 1}, "int4", True),
    Workload("int4_gemm_mlc_m2048", BENCH / "int4_matmul_mlc.json", {"M": 2048}, "int4", True),
    Workload("softmax_rows", BENCH / "softmax_rows.json", {}, "softmax", True),
    Workload("layernorm_rows", BENCH / "layernorm_rows.json", {}, "layernorm", True),
    Workload("rmsnorm_rows", BENCH / "rmsnorm_rows.json", {}, "rmsnorm", True),
]


@dataclass
class Tuned:
    """A workload's tuning: the tuner's own measurements and the exported best kernel."""

    trials: int
    wall_s: float
    naive_s: float | None
    best_s: float | None
    config: dict[str, Any] | None
    failures: dict[str, int]
    flops: int | None
    kernel_dir: str | None
    by_mode: dict[str, float] = field(default_factory=dict)
    measured: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Result:
    workload: str
    implementation: str
    latency_s: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    relative_error: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------ tuning


def tune_all(workloads: list[Workload], trials: int, seed: int, tmp: Path) -> dict[str, Tuned]:
    """Tune every workload on this machine's GPU; export each best kernel under `tmp`."""
    from bench.tuning import scratch_database, tune
    from tunehub.runtime.directory import save_kernel
    from tunehub.schemas import TaskSignature
    from tunehub.schemas.record import RecordStatus
    from tunehub.schemas.target import Target
    from tunehub.server.db.artifacts import get_artifact
    from tunehub.server.db.records import list_records
    from tunehub.server.db.session import session_scope
    from tunehub.server.tuner import LocalExecutor

    sessions = scratch_database(tmp)
    tuned = {}
    with LocalExecutor() as executor:
        target = executor.resolve(Target(kind="cuda"))
        for w in workloads:
            signature = TaskSignature.model_validate_json(w.signature.read_text())
            summary, wall = tune(
                sessions, executor, signature, target, trials=trials, symbols=w.symbols, seed=seed
            )
            kernel_dir = None
            with session_scope(sessions) as s:
                records = list_records(
                    s, tuning_id=summary.tuning_id, status=RecordStatus.OK, limit=None
                )
                by_mode = best_by_mode([(r.config, r.latency_s) for r in records])
                measured = [{"config": r.config, "latency_s": r.latency_s} for r in records]
                if summary.best is not None and summary.best.artifact_sha256 is not None:
                    artifact = get_artifact(s, summary.best.artifact_sha256)
                    assert artifact is not None
                    kernel_dir = str(tmp / w.name)
                    meta = {**artifact.meta, "config": summary.best.config, "target": str(target)}
                    save_kernel(kernel_dir, artifact.data, artifact.source, meta)
            tuned[w.name] = Tuned(
                trials=summary.trials,
                wall_s=wall,
                naive_s=summary.baseline_latency_s,
                best_s=summary.best.latency_s if summary.best else None,
                config=summary.best.config if summary.best else None,
                failures=summary.failures,
                flops=summary.flops,
                kernel_dir=kernel_dir,
                by_mode=by_mode,
                measured=measured,
            )
            best = f"{summary.best.latency_s * 1e6:.1f} us" if summary.best else "no kernel"
            print(f"tuned {w.name} on {target}: {summary.trials} trials, {wall:.0f} s, {best}")
    return tuned


def best_by_mode(measured: list[tuple[dict[str, Any], float | None]]) -> dict[str, float]:
    """The least latency per combination of the stages' kernel modes (`s0=wgmma`), so a
    report shows which kernel family won and by how much."""
    best: dict[str, float] = {}
    for config, latency in measured:
        if latency is None:
            continue
        modes = sorted((k.split(".")[0], v) for k, v in config.items() if k.endswith(".mode"))
        key = ", ".join(f"{stage}={mode}" for stage, mode in modes) or "-"
        best[key] = min(best.get(key, latency), latency)
    return dict(sorted(best.items(), key=lambda item: item[1]))


# ------------------------------------------------------------------------------ timing


class Timer:
    """Median seconds per call: CUDA events around each call, the L2 flushed before it."""

    def __init__(self, torch: Any, repeats: int) -> None:
        self.torch, self.repeats = torch, repeats
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(2 * max(l2, 1 << 20), dtype=torch.uint8, device="cuda")

    def median(self, call: Callable[[], Any]) -> float:
        torch = self.torch
        for _ in range(3):  # warm-up: module loads, Triton's autotuning, cuBLAS heuristics
            call()
        torch.cuda.synchronize()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(self.repeats)
        ]
        for start, end in events:
            self.flush.zero_()
            start.record()
            call()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events) / 1e3


READ = r"""
extern "C" __global__ void tunehub_read(const uint4* __restrict__ data, long long count,
                                        unsigned int* sink) {
  long long first = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
  unsigned int folded = 0;
  #pragma unroll
  for (int j = 0; j < 4; j++) {
    long long at = first + (long long)j * blockDim.x;
    if (at < count) {
      uint4 v = data[at];
      folded ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (folded == 0x9e3779b9u) *sink = folded;
}
"""
READ_THREADS = 256  # per block; each thread reads 4 x 16 bytes


def read_floor(torch: Any, timer: Timer, nbytes: int) -> float | None:
    """Seconds to read `nbytes` once (four 16-byte loads per thread, L2 flushed before, as
    every kernel here is timed): launch, latency and ramp-up included, which a large copy
    amortizes and a few-megabyte kernel cannot. None where cupy is missing."""
    try:
        import cupy
    except ImportError:
        return None
    kernel = cupy.RawKernel(READ, "tunehub_read")
    count = -(-nbytes // 16)
    data = torch.zeros(count * 16, dtype=torch.uint8, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    blocks = -(-count // (4 * READ_THREADS))
    args = (cupy.asarray(data).view(cupy.uint32), cupy.int64(count), cupy.asarray(sink))
    return timer.median(lambda: kernel((blocks,), (READ_THREADS,), args))


def copy_bandwidth(torch: Any, timer: Timer) -> float:
    """Bytes per second of a large device-to-device copy, counting bytes read and written."""
    source = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    return 2 * COPY_BYTES / timer.median(lambda: target.copy_(source))


def inputs_for(torch: Any, kernel: Any, symbols: dict[str, int]) -> list[Any]:
    """Random inputs in signature order: floats in [-1, 1), int4 scales small and positive,
    packed weights as random 32-bit words."""
    generator = torch.Generator(device="cuda").manual_seed(0)
    made = []
    for arg in kernel.inputs:
        shape = [e if isinstance(e, int) else symbols[e] for e in arg.shape]
        if arg.dtype == "uint32":
            words = torch.randint(
                -(2**31), 2**31, shape, dtype=torch.int32, device="cuda", generator=generator
            )
            made.append(words.view(torch.uint32))
            continue
        dtype = getattr(torch, arg.dtype)
        value = torch.rand(shape, device="cuda", generator=generator) * 2 - 1
        if arg.name == "scales":
            value = (value.abs() + 0.5) / 64
        made.append(value.to(dtype))
    return made


def baselines(torch: Any, w: Workload, inputs: list[Any]) -> dict[str, Callable[[], Any]]:
    """The implementations a workload is set against, each a call returning its output."""
    if w.kind == "gemm":
        a, b = inputs
        out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float16, device="cuda")
        found: dict[str, Callable[[], Any]] = {CUBLAS: lambda: torch.matmul(a, b, out=out)}
        try:
            from bench import triton_matmul
        except ImportError:
            return found
        triton_out = torch.empty_like(out)
        found[TRITON] = lambda: triton_matmul.matmul(a, b, triton_out)
        return found
    if w.kind == "int4":
        x, packed, scales, bias, residual = inputs
        # the MLC form's unit batch axis: [1, M, K] and [1, M, N] as the matrices they are
        x, residual = x.reshape(-1, x.shape[-1]), residual.reshape(-1, residual.shape[-1])
        words = packed.view(torch.int32)
        shifts = torch.arange(0, 32, 4, dtype=torch.int32, device="cuda")
        group = x.shape[1] // scales.shape[1]

        def dequantized() -> Any:
            nibbles = (words.unsqueeze(-1) >> shifts) & 15  # [N, K/8, 8], k % 8 fastest
            weights = nibbles.reshape(words.shape[0], -1).to(torch.float16) - 7
            return weights * scales.repeat_interleave(group, dim=1)

        int4: dict[str, Callable[[], Any]] = {
            INT4_PEERS[0]: lambda: torch.addmm(residual + bias, x, dequantized().t())
        }
        # The GEMM the int4 kernel saves the user from: fp16 weights, bias and residual
        # summed beforehand, cuBLAS adding them in its epilogue (beta = 1).
        fp16_t, added = dequantized().t(), residual + bias
        cublas_out = torch.empty_like(residual)
        int4[CUBLAS_FP16] = lambda: torch.addmm(added, x, fp16_t, out=cublas_out)
        try:
            from bench import triton_int4
        except ImportError:
            return int4
        triton_out = torch.empty_like(residual)
        int4[INT4_PEERS[1]] = lambda: triton_int4.linear(
            x, words, scales, bias, residual, triton_out
        )
        return int4
    if w.kind == "softmax":
        (x,) = inputs
        return {"torch.softmax": lambda: torch.softmax(x, dim=-1)}
    if w.kind == "rmsnorm":
        x, weight = inputs
        width = (x.shape[-1],)
        return {"torch rms_norm": lambda: torch.nn.functional.rms_norm(x, width, weight, 1e-6)}
    x, gamma, beta = inputs
    width = (x.shape[-1],)
    return {"torch layer_norm": lambda: torch.nn.functional.layer_norm(x, width, gamma, beta, 1e-5)}


def measure(torch: Any, timer: Timer, w: Workload, tuned: Tuned | None) -> list[Result]:
    """The tuned kernel and the workload's baselines, each timed and checked against the
    first baseline's output."""
    from tunehub.runtime import load_kernel, numpy_dtype
    from tunehub.targets.cuda.kernel import CudaKernel

    if tuned is None or tuned.kernel_dir is None:
        return [Result(w.name, TUNED, note="the tuning found no verified kernel")]
    kernel = load_kernel(tuned.kernel_dir)
    assert isinstance(kernel, CudaKernel)
    symbols = dict(w.symbols)
    inputs = inputs_for(torch, kernel, symbols)
    (output,) = kernel.outputs
    moved = sum(  # the fewest bytes: every input read once, every output written once
        numpy_dtype(arg.dtype).itemsize
        * math.prod(e if isinstance(e, int) else symbols[e] for e in arg.shape)
        for arg in (*kernel.inputs, *kernel.outputs)
    )
    launch = kernel.bind(*inputs, **symbols)
    calls: dict[str, Callable[[], Any]] = {TUNED: launch}
    calls.update(baselines(torch, w, inputs))
    reference_name = next(name for name in calls if name != TUNED)
    reference = calls[reference_name]().float()
    results = []
    for name, call in calls.items():
        try:
            latency = timer.median(call)
            actual = launch.result if call is launch else call()
        except Exception as failure:  # a peer that fails here (say, a Triton version's
            # compile error) is reported, and the other implementations still measured
            note = f"failed: {type(failure).__name__}: {str(failure).splitlines()[0][:200]}"
            results.append(Result(w.name, name, note=note))
            continue
        error = float((actual.float() - reference).norm() / reference.norm().clamp_min(1e-30))
        wrong = error > TOLERANCE[output.dtype]
        results.append(
            Result(
                w.name,
                name,
                latency_s=latency,
                tflops=tuned.flops / latency / 1e12 if tuned.flops else None,
                gbps=moved / latency / 1e9,
                relative_error=error,
                note=f"WRONG: error {error:.2g} vs {reference_name}" if wrong else "",
            )
        )
    launch.close()
    floor = read_floor(torch, timer, moved) if w.kind == "int4" else None
    if floor is not None:
        note = "one streaming pass over as many bytes (no output)"
        gbps = moved / floor / 1e9
        results.append(Result(w.name, READ_FLOOR, latency_s=floor, gbps=gbps, note=note))
    mine = results[0]
    mine.extra = {
        "tuner_latency_s": tuned.best_s,
        "naive_latency_s": tuned.naive_s,
        "trials": tuned.trials,
        "tuning_wall_s": tuned.wall_s,
        "config": tuned.config,
        "failures": tuned.failures,
        "best_by_mode_s": tuned.by_mode,
        "measured": tuned.measured,
    }
    return results


# ------------------------------------------------------------------------------ report


def table(results: list[Result], bandwidth: float) -> str:
    lines = [
        "| workload | implementation | latency | TFLOP/s | GB/s | % of copy BW "
        "| speed vs first baseline | rel. error | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    firsts: dict[str, float] = {}
    for r in results:
        if r.implementation != TUNED and r.latency_s is not None:
            firsts.setdefault(r.workload, r.latency_s)
    for r in results:
        latency = f"{r.latency_s * 1e6:.1f} us" if r.latency_s is not None else "-"
        tflops = f"{r.tflops:.1f}" if r.tflops is not None else "-"
        gbps = f"{r.gbps:.0f}" if r.gbps is not None else "-"
        share = f"{100 * r.gbps * 1e9 / bandwidth:.0f}%" if r.gbps is not None else "-"
        first = firsts.get(r.workload)
        ratio = f"{first / r.latency_s:.2f}x" if first and r.latency_s else "-"
        error = f"{r.relative_error:.1e}" if r.relative_error is not None else "-"
        lines.append(
            f"| {r.workload} | {r.implementation} | {latency} | {tflops} | {gbps} | {share} "
            f"| {ratio} | {error} | {r.note} |"
        )
    return "\n".join(lines)


def bars(results: list[Result]) -> list[str]:
    """Issue 14's bars, each where this run measured both sides of it: the tuned kernel's
    speed relative to a peer (its latency over the kernel's), against the bar."""
    latency = {(r.workload, r.implementation): r.latency_s for r in results if r.latency_s}
    found = []

    def bar(workload: str, peer: str, goal: float, what: str) -> None:
        mine, theirs = latency.get((workload, TUNED)), latency.get((workload, peer))
        if mine and theirs:
            speed = theirs / mine
            verdict = "met" if speed >= goal else "MISSED"
            found.append(f"{workload}: {speed:.2f}x {what} (bar {goal:.2f}x): {verdict}")

    for workload in sorted({r.workload for r in results}):
        if workload.startswith("gemm_"):
            for peer, goal in GEMM_BARS.items():
                bar(workload, peer, goal, peer)
        elif workload.endswith("_rows"):
            peers = [r.implementation for r in results if r.workload == workload]
            bar(workload, next(p for p in peers if p.startswith("torch")), ROW_BAR, "torch")
        elif workload.startswith("int4_gemv"):
            bar(workload, READ_FLOOR, FLOOR_BAR, "the read floor")
            for peer in INT4_PEERS:
                bar(workload, peer, 1.0, peer)
        elif workload.startswith("int4_gemm"):
            bar(workload, CUBLAS_FP16, INT4_GEMM_BAR, "fp16 cuBLAS on the same shape")
    return found


def gpu_description(torch: Any) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    gpu = device.gpus()[0]
    versions = {"torch": torch.__version__, "torch CUDA": torch.version.cuda}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = "not installed (Triton baseline left out)"
    from tunehub.targets.cuda.build import nvcc_version

    versions["nvcc"] = nvcc_version() or "?"
    return {
        "gpu": props.name,
        "arch": gpu["gpu_arch"],
        "sms": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_mib": round(props.L2_cache_size / 2**20, 1),
        "driver": gpu["driver_version"],
        "versions": versions,
    }


def mode_lines(results: list[Result]) -> list[str]:
    lines = []
    for r in results:
        by_mode = r.extra.get("best_by_mode_s")
        if by_mode:
            modes = ", ".join(f"{mode} {latency * 1e6:.1f} us" for mode, latency in by_mode.items())
            lines.append(f"{r.workload}: {modes}")
    return lines


def write_report(
    out: Path,
    args: argparse.Namespace,
    gpu: dict[str, Any],
    bandwidth: float,
    results: list[Result],
) -> Path:
    today = datetime.date.today().isoformat()
    lines = [
        f"# GPU kernels: tunehub tuned vs cuBLAS, Triton and torch ({today})",
        "",
        f"- GPU: {gpu['gpu']} ({gpu['arch']}, {gpu['sms']} SMs, {gpu['memory_gib']} GiB, "
        f"{gpu['l2_mib']} MiB L2), driver {gpu['driver']}",
        f"- software: {', '.join(f'{k} {v}' for k, v in gpu['versions'].items())}",
        f"- host: {describe_machine()}",
        f"- commit: {args.commit}",
        f"- command: `python bench/gpu_kernels.py {' '.join(sys.argv[1:])}`".rstrip(),
        f"- trials per workload: {args.trials} (default strategy), timing: median of "
        f"{args.repeats} calls, CUDA events, L2 flushed before each",
        f"- device-to-device copy: {bandwidth / 1e9:.0f} GB/s (read + written)",
        "",
        table(results, bandwidth),
        "",
        *(f"- {line}" for line in bars(results)),
        "",
        "Best tuned latency per kernel mode (the tuner's own measurements):",
        "",
        *(f"- {line}" for line in mode_lines(results)),
        "",
    ]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu_kernels-{today}.md"
    path.write_text("\n".join(lines))
    document = {
        "date": today,
        "commit": args.commit,
        "host": describe_machine(),
        "device": gpu,
        "copy_bandwidth_bytes_s": bandwidth,
        "trials": args.trials,
        "repeats": args.repeats,
        "results": [asdict(r) for r in results],
    }
    path.with_suffix(".json").write_text(json.dumps(document, indent=2) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, help=f"per workload (default {TRIALS}; quick 16)")
    parser.add_argument("--quick", action="store_true", help="fewer trials and workloads")
    parser.add_argument("--only", nargs="+", choices=[w.name for w in WORKLOADS])
    parser.add_argument("--repeats", type=int, default=50, help="timed calls per kernel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--commit", default=None, help="(default: git rev-parse here)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    args.trials = args.trials or (QUICK_TRIALS if args.quick else TRIALS)
    args.commit = args.commit or git_commit()
    if not device.gpus():
        sys.exit("gpu_kernels: no CUDA GPU visible to cuda-python here; run it on a GPU machine")
    try:
        import torch
    except ImportError:
        sys.exit("gpu_kernels: torch is not installed; it times the baselines")
    workloads = [
        w for w in WORKLOADS if (w.name in args.only if args.only else (w.quick or not args.quick))
    ]
    with tempfile.TemporaryDirectory(prefix="tunehub-gpu-bench-") as tmp:
        tuned = tune_all(workloads, args.trials, args.seed, Path(tmp))
        timer = Timer(torch, args.repeats)
        bandwidth = copy_bandwidth(torch, timer)
        results: list[Result] = []
        for w in workloads:
            results += measure(torch, timer, w, tuned.get(w.name))
            print(table([r for r in results if r.workload == w.name], bandwidth), flush=True)
    gpu = gpu_description(torch)
    path = write_report(args.out, args, gpu, bandwidth, results)
    print()
    print(table(results, bandwidth))
    for line in bars(results):
        print(line)
    print(f"\nwrote {path} and {path.with_suffix('.json').name}")


if __name__ == "__main__":
    main()
