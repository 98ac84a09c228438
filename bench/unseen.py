"""Workloads outside the examples, the forms and the other benchmarks, each tuned on the CPU
and timed beside numpy: whether the spaces are general or fitted to what tunehub was built on.

    python bench/unseen.py                  # 32 trials, one thread, every workload
    python bench/unseen.py --trials 16 --only attention swiglu

The signatures are `bench/data/unseen/*.json`: attention (scores, softmax and the weighted sum
of 8 heads), a depthwise 3x3 convolution with stride 2 in NHWC, a softmax down the columns,
an int8 matmul with int32 sums and a float epilogue of two scales, a 2x2 max pool, a mean
over a middle axis, a SwiGLU block (two matmuls and a gated product) and a matmul reading
both operands transposed. Each is tuned from scratch through the real tuner; its best kernel
is then timed once more beside two numpy versions, one after the other, on one thread, by
the same rule (`worker.measure.library.median_call_s`): the signature evaluated compute by
compute as array expressions, as a tuning's library baseline does (where a reduction reads
through `where` or strides, that builds large intermediates), and the numpy a user would
write by hand (`PEERS`, checked against the reference first); and, where torch has the op
itself and is installed, torch's (`TORCH_PEERS`: attention is `scaled_dot_product_attention`)
on one thread too. The report goes to
docs/benchmarks/unseen-<date>-<isa>.md with the machine and the commit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import write_cpu_report  # noqa: E402
from bench.tuning import median_latency, tune_cpu  # noqa: E402
from tunehub.compiler.inputs import random_inputs  # noqa: E402
from tunehub.compiler.ir import Program  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.compiler.reference import evaluate  # noqa: E402
from tunehub.worker.measure.library import library_latency, median_call_s  # noqa: E402

WORKLOADS = ROOT / "bench" / "data" / "unseen"
Arrays = dict[str, np.ndarray]


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _attention(a: Arrays) -> np.ndarray:
    scores = a["Q"] @ a["K"].transpose(0, 2, 1) * np.float32(0.125)
    return _softmax(scores, -1) @ a["V"]


def _dwconv(a: Arrays) -> np.ndarray:
    x = np.pad(a["x"], ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((1, 28, 28, 64), np.float32)
    for ry in range(3):
        for rx in range(3):
            out += x[:, ry : ry + 56 : 2, rx : rx + 56 : 2, :] * a["w"][ry, rx]
    return out


def _int8mm(a: Arrays) -> np.ndarray:
    """Through float32 BLAS (numpy has no integer BLAS): exact, as every partial sum of 512
    products of int8 values is below 2^24."""
    acc = a["A"].astype(np.float32) @ a["B"].astype(np.float32).T
    return acc * a["sa"][:, None] * a["sb"][None, :]


def _maxpool(a: Arrays) -> np.ndarray:
    x = a["x"]
    corners = [x[:, :, dy::2, dx::2] for dy in range(2) for dx in range(2)]
    return np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))


def _swiglu(a: Arrays) -> np.ndarray:
    up, gate = a["x"] @ a["w1"], a["x"] @ a["w2"]
    return up / (1 + np.exp(-up)) * gate


# The numpy a user would write for each workload (inputs by name, the output returned).
PEERS: dict[str, Callable[[Arrays], np.ndarray]] = {
    "attention": _attention,
    "colsoftmax": lambda a: _softmax(a["X"], 0),
    "dwconv": _dwconv,
    "int8mm": _int8mm,
    "maxpool": _maxpool,
    "meanmid": lambda a: (a["x"] * np.float32(0.005)).sum(axis=1),
    "swiglu": _swiglu,
    "tmatmul": lambda a: a["A"].T @ a["B"],
}


def _torch_attention(a: Arrays) -> Callable[[], np.ndarray]:
    import torch

    q, k, v = (torch.from_numpy(a[name]) for name in "QKV")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(q, k, v, scale=0.125).numpy()


# Torch's own op for a workload, where it has one: a call on the inputs, made once.
TORCH_PEERS: dict[str, Callable[[Arrays], Callable[[], np.ndarray]]] = {
    "attention": _torch_attention,
}


def main() -> None:
    names = sorted(path.stem for path in WORKLOADS.glob("*.json"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--only", nargs="+", choices=names)
    args = parser.parse_args()
    lines = [
        "| workload | tunehub | numpy by hand | speed vs numpy by hand | numpy, as the "
        "signature | speed vs that | torch's own op | speed vs torch | tuning |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    configs = []
    for name in args.only or names:
        document = json.loads((WORKLOADS / f"{name}.json").read_text())
        start = time.perf_counter()
        kernel = tune_cpu({k: v for k, v in document.items() if k != "version"}, args.trials)
        tuning = time.perf_counter() - start
        ours = median_latency(kernel)
        hand = _peer_latency(name, load(document))
        numpy = library_latency(load(document), {}, threads=1)
        torch = _torch_latency(name, load(document))
        beside = "| - | - " if torch is None else f"| {torch * 1e3:.4f} ms | {torch / ours:.2f}x "
        lines.append(
            f"| {name} | {ours * 1e3:.4f} ms | {hand * 1e3:.4f} ms | {hand / ours:.2f}x | "
            f"{numpy * 1e3:.4f} ms | {numpy / ours:.2f}x {beside}| {tuning:.0f} s |"
        )
        configs.append(f"- {name}: {kernel.knobs()}")
        print(lines[-1], flush=True)
    write_cpu_report(
        "unseen",
        "Workloads outside the examples, tuned and timed beside numpy",
        f"python bench/unseen.py --trials {args.trials}",
        "one thread; each tuned kernel timed again right before the two numpy versions (and "
        "torch's own op, where it has one), by the same rule: the median of batches of at "
        "least 50 ms; numpy as the signature is the tuning's own library baseline, compute by "
        "compute",
        args.only,
        "\n".join(lines) + "\n\nThe tuned kernels:\n\n" + "\n".join(configs) + "\n",
    )


def _peer_latency(name: str, program: Program) -> float:
    """The hand-written numpy of `name` on one thread, once its output is checked against the
    reference on the same inputs."""
    inputs = random_inputs(program, {}, seed=0)
    expected = evaluate(program, inputs, {})[program.outputs[0]]
    got = PEERS[name](inputs)
    if not np.allclose(got, expected, rtol=1e-3, atol=1e-4):
        raise SystemExit(f"{name}: the numpy peer disagrees with the reference")
    return median_call_s(lambda: PEERS[name](inputs), threads=1)


def _torch_latency(name: str, program: Program) -> float | None:
    """Torch's own op for `name` on one thread, once checked against the reference; None
    where it has none or torch is not installed."""
    if name not in TORCH_PEERS:
        return None
    try:
        import torch
    except ImportError:
        return None
    inputs = random_inputs(program, {}, seed=0)
    expected = evaluate(program, inputs, {})[program.outputs[0]]
    call = TORCH_PEERS[name](inputs)
    if not np.allclose(call(), expected, rtol=1e-3, atol=1e-4):
        raise SystemExit(f"{name}: torch disagrees with the reference")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return median_call_s(call, threads=1)
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    main()
