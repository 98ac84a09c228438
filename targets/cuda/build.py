"""Build CUDA kernels into cubins with nvcc (front end to PTX) and ptxas (PTX to SASS).

Two steps rather than `nvcc -cubin`, which runs the same two internally, because the front
end is what costs: nvcc spends ~0.7 s preprocessing the CUDA headers and starting cicc, while
ptxas takes tens of milliseconds per kernel. `build_many` therefore compiles several
candidates as one translation unit (each in its own namespace, its entries renamed apart),
cuts the PTX back into one module per candidate, and runs ptxas per candidate (in parallel):
one front-end start for the whole batch. Each candidate is a file of its own to the front
end (`#line`), so its warnings go to its own log; when a batch's front end fails, its
candidates are built one by one instead, so that a broken candidate gets its own log and
never takes others down.

Hopper's warpgroup instructions (`wgmma`) exist only for the arch-specific target sm_90a, so a
kernel using them is built for sm_90a when the target is sm_90 (`build_arch`; such a cubin
runs on every sm_90 GPU, and a batch holding one is built for sm_90a as a whole).

`ptxas -v` reports, per function, registers, barriers, static shared memory, constant memory,
stack frame and spill bytes; these are the build stats (`stats["kernels"][entry]`), since
they decide occupancy and explain slow candidates without running them.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tunehub.compiler.kernel import Kernel
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.emulate.emulator import entries_of
from tunehub.worker.build.builder import Builder, BuildResult, run_compiler, truncate

OPT_FLAGS = ("-O3", "-lineinfo")
# A batch's front end may take longer than one candidate's; past this many times the
# per-candidate timeout it is abandoned and its candidates are built one by one.
BATCH_TIMEOUT_FACTOR = 2.0
_BATCH = "__tunehub_batch"
_UNIT_FILE = "candidate_{}.cu"
_DIAGNOSTIC = re.compile(r"^candidate_(\d+)\.cu\(\d+\): ")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"][^\n]*$", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)
_ENTRY = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$][\w$]*)")
_ARCH_SPECIFIC = re.compile(r"\bwgmma\.")


class CudaBuilder(Builder):
    """nvcc + ptxas for `cuda` targets. `emit_ptx` keeps each candidate's PTX in
    `stats["ptx"]` (the cubin is always the artifact)."""

    def __init__(self, nvcc: str = "nvcc", ptxas: str = "ptxas", emit_ptx: bool = False) -> None:
        self.nvcc = nvcc
        self.ptxas = ptxas
        self.emit_ptx = emit_ptx

    def build(self, kernel: Kernel, target: Target, timeout_s: float) -> BuildResult:
        return self.build_many([kernel], target, timeout_s)[0]

    def build_many(
        self, kernels: Sequence[Kernel], target: Target, timeout_s: float
    ) -> list[BuildResult]:
        """One result per kernel, in order; `timeout_s` bounds each candidate's build."""
        arch = target.arch
        if target.kind != "cuda" or arch is None or any(k.language != "cuda" for k in kernels):
            raise ValueError(f"CudaBuilder builds CUDA kernels for an arch, not for {target}")
        if len(kernels) > 1:
            batched = self._batch(kernels, build_arch(arch, kernels), timeout_s)
            if batched is not None:
                return batched
        return [self._single(k, build_arch(arch, [k]), timeout_s) for k in kernels]

    def _single(self, kernel: Kernel, arch: str, timeout_s: float) -> BuildResult:
        with tempfile.TemporaryDirectory(prefix="tunehub-nvcc-") as tmp:
            start = time.perf_counter()
            status, log = self._front_end(kernel.source, arch, timeout_s, tmp)
            if status is not RecordStatus.OK:
                return BuildResult(status, time.perf_counter() - start, truncate(log))
            ptx = Path(tmp, "kernel.ptx").read_text()
            remaining = timeout_s - (time.perf_counter() - start)
            return self._back_end(ptx, arch, remaining, tmp, start, log)

    def _batch(
        self, kernels: Sequence[Kernel], arch: str, timeout_s: float
    ) -> list[BuildResult] | None:
        """All of `kernels` through one front end, or None if anything went wrong."""
        with tempfile.TemporaryDirectory(prefix="tunehub-nvcc-") as tmp:
            start = time.perf_counter()
            source = batch_source([(k.source, entries_of(k)) for k in kernels])
            status, log = self._front_end(source, arch, BATCH_TIMEOUT_FACTOR * timeout_s, tmp)
            if status is not RecordStatus.OK:
                return None  # one candidate's error stops them all: build them apart
            ptx = Path(tmp, "kernel.ptx").read_text()
            logs = split_log(log, len(kernels))
            shared_s = (time.perf_counter() - start) / len(kernels)

            def back_end(n: int) -> BuildResult:
                begin = time.perf_counter() - shared_s
                unit = f"candidate_{n}"
                return self._back_end(split_ptx(ptx, n), arch, timeout_s, tmp, begin, logs[n], unit)

            with ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
                return list(pool.map(back_end, range(len(kernels))))

    def _front_end(self, source: str, arch: str, timeout_s: float, tmp: str) -> tuple[Any, str]:
        Path(tmp, "kernel.cu").write_text(source)
        virtual = arch.replace("sm_", "compute_")
        command = [self.nvcc, "-ptx", f"-arch={virtual}", *OPT_FLAGS, "-o", "kernel.ptx"]
        return run_compiler([*command, "kernel.cu"], timeout_s, cwd=tmp)

    def _back_end(
        self,
        ptx: str,
        arch: str,
        timeout_s: float,
        tmp: str,
        start: float,
        front_log: str,
        name: str = "kernel",
    ) -> BuildResult:
        """ptxas on `ptx` (written to `name`.ptx in `tmp`, so batches may run in parallel)."""
        Path(tmp, f"{name}.ptx").write_text(ptx)
        command = [self.ptxas, f"-arch={arch}", *OPT_FLAGS, "-v", "-o", f"{name}.cubin"]
        status, log = run_compiler([*command, f"{name}.ptx"], max(timeout_s, 1.0), cwd=tmp)
        elapsed = time.perf_counter() - start
        log = "\n".join(part for part in (front_log.strip(), log.strip()) if part)
        if status is not RecordStatus.OK:
            return BuildResult(status, elapsed, truncate(log))
        artifact = Path(tmp, f"{name}.cubin").read_bytes()
        stats: dict[str, Any] = {
            "compiler": f"nvcc {nvcc_version(self.nvcc) or '?'}",
            "arch": arch,
            "flags": [*OPT_FLAGS, "-Xptxas", "-v"],
            "artifact_bytes": len(artifact),
            "kernels": parse_ptxas(log),
        }
        if self.emit_ptx:
            stats["ptx"] = ptx
        return BuildResult.success(artifact, elapsed, log, stats)


def batch_source(units: Sequence[tuple[str, Sequence[str]]]) -> str:
    """One translation unit holding every (source, entries) unit.

    Unit n lives in `namespace tunehub_batch_n` with its entries renamed to
    `<entry>__tunehub_batch<n>` (extern "C" names ignore namespaces) and its macros undefined
    after it; includes are hoisted to the top, where their include guards make them count once.
    """
    includes = dict.fromkeys(m.strip() for source, _ in units for m in _INCLUDE.findall(source))
    parts = [*includes]
    for n, (source, entries) in enumerate(units):
        macros = dict.fromkeys(_DEFINE.findall(source))
        parts += [f"#define {e} {e}{_BATCH}{n}" for e in entries]
        # Diagnostics and line info count lines within the candidate, in a file of its own.
        parts += [f"namespace tunehub_batch_{n} {{", f'#line 1 "{_UNIT_FILE.format(n)}"']
        parts += [_INCLUDE.sub("", source), "}"]
        parts += [f"#undef {name}" for name in [*macros, *entries]]
    return "\n".join(parts) + "\n"


def build_arch(arch: str, kernels: Sequence[Kernel]) -> str:
    """The arch to build `kernels` for: sm_90a where the target is sm_90 and one of them
    issues wgmma (see the module doc), else `arch`."""
    if arch == "sm_90" and any(_ARCH_SPECIFIC.search(k.source) for k in kernels):
        return "sm_90a"
    return arch


def split_log(log: str, units: int) -> list[str]:
    """The front end's diagnostics of a batch, per unit, under the name `kernel.cu` that a
    build of the candidate alone would give. A diagnostic runs from its `file(line): ` head to
    the next head; lines before any head, which name no candidate, go to every unit."""
    common: list[str] = []
    own: list[list[str]] = [[] for _ in range(units)]
    current: list[str] = common
    for line in log.splitlines():
        head = _DIAGNOSTIC.match(line)
        if head:
            current = own[int(head[1])]
            line = "kernel.cu" + line[line.index("(") :]
        elif line.startswith("Remark: "):  # the footer of every warning list
            continue
        current.append(line)
    return ["\n".join(common + lines).strip() for lines in own]


def split_ptx(ptx: str, n: int) -> str:
    """The PTX of unit `n` of a batch: other units' entry functions removed, its own entries
    given back their names, mangled ones too (`_ZZ<length><entry>E3red` is a kernel's static
    shared array `red`)."""
    suffix = f"{_BATCH}{n}"
    own = re.compile(re.escape(suffix) + r"(?!\d)")
    kept: list[str] = []
    skipping, depth = False, 0  # braces open in a skipped entry (inline asm has blocks too)
    for line in ptx.splitlines():
        entry = _ENTRY.match(line)
        if entry and _BATCH in entry[1] and not own.search(entry[1]):
            skipping, depth = True, 0
            if kept and kept[-1].strip().startswith("// .globl"):
                kept.pop()
        if skipping:
            opened = depth > 0 or "{" in line
            depth += line.count("{") - line.count("}")
            skipping = not (opened and depth == 0)
        elif not (line.lstrip().startswith("//") and _BATCH in line and not own.search(line)):
            kept.append(line)  # comments naming other units' symbols go too

    def unmangle(match: re.Match[str]) -> str:
        name = match["name"]
        if int(match["length"]) != len(name) + len(suffix):
            return match[0]
        return f"{len(name)}{name}"

    mangled = rf"(?P<length>\d+)(?P<name>[A-Za-z_]\w*?){re.escape(suffix)}(?!\d)"
    return own.sub("", re.sub(mangled, unmangle, "\n".join(kept))) + "\n"


_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_ENTRY_INFO = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_USED = re.compile(r"Used (\d+) registers")
_SERIALIZED = re.compile(
    r"\(C75\d\d\) Potential Performance Loss: wgmma\.mma_async instructions are serialized"
    r".*? in the function '([\w$.]+)'"
)
_USAGE = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "constant_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def parse_ptxas(log: str) -> dict[str, dict[str, int]]:
    """Per function of a `ptxas -v` log: registers, barriers, shared_bytes (static),
    constant_bytes, stack_bytes, spill_store_bytes, spill_load_bytes (those reported), and
    `wgmma_serialized` 1 where ptxas made the function's wgmmas wait for each other (its
    C75xx "Potential Performance Loss" notes: the tensor cores then never overlap)."""
    stats: dict[str, dict[str, int]] = {}
    for function in _SERIALIZED.findall(log):
        stats.setdefault(function, {})["wgmma_serialized"] = 1
    current: str | None = None
    for line in log.splitlines():
        named = _ENTRY_INFO.search(line)
        if named:
            current = named[1]
            stats.setdefault(current, {})
            continue
        if current is None:
            continue
        frame = _FRAME.search(line)
        if frame:
            stack, stores, loads = (int(v) for v in frame.groups())
            stats[current].update(
                stack_bytes=stack, spill_store_bytes=stores, spill_load_bytes=loads
            )
        used = _USED.search(line)
        if used:
            stats[current]["registers"] = int(used[1])
            for key, pattern in _USAGE.items():
                match = pattern.search(line)
                stats[current][key] = int(match[1]) if match else 0
    return stats


@functools.cache
def nvcc_version(nvcc: str = "nvcc") -> str | None:
    """`13.0.88` from `nvcc --version`; None where nvcc cannot run."""
    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release [\d.]+, V([\d.]+)", done.stdout)
    return match[1] if match else None
