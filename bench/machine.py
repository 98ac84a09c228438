"""What every benchmark report states: the machine and the commit it measured."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def describe_machine() -> str:
    """CPU model, core count and memory, read from the OS (e.g. for a report header)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        total_kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {total_kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    # The load when the report was written: figures from a busy machine say so.
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{model}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}, "
        f"load average {load:.1f}"
    )


def git_commit() -> str:
    """The checked-out commit, marked `-dirty` when the tree has uncommitted changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{commit}-dirty" if dirty else commit or "unknown"


def cpu_tag(isa: str) -> str:
    """A CPU report's tag: the ISA and the vendor (`x86_64-avx512-amd`), so that two machines
    of one ISA measured on one day (an AVX-512 Xeon and an AVX-512 EPYC) keep two reports."""
    vendors = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = vendors.get(line.split(":", 1)[1].strip())
                return f"{isa}-{vendor}" if vendor else isa
    except OSError:
        pass
    return isa


def only_suffix(only: list[str] | None) -> tuple[str, str]:
    """For a run limited by `--only`: the option as the report states its command, and the
    tag suffix that keeps its report apart from a full run's."""
    if not only:
        return "", ""
    return f" --only {' '.join(only)}", "-" + "-".join(only)


def report_path(name: str, tag: str = "") -> Path:
    """`docs/benchmarks/<name>-<date>[-<tag>].md`, or with `-2`, `-3`, ... the first that
    does not exist yet: a tag (such as the CPU's ISA) keeps the reports of one day on different
    kinds of machine apart, the count those of two machines of one kind (and two runs)."""
    suffix = f"-{tag}" if tag else ""
    stem = ROOT / "docs" / "benchmarks" / f"{name}-{datetime.date.today().isoformat()}{suffix}"
    path, count = stem.with_name(stem.name + ".md"), 1
    while path.exists():
        count += 1
        path = stem.with_name(f"{stem.name}-{count}.md")
    return path


def write_cpu_report(
    name: str, title: str, command: str, how: str, only: list[str] | None, body: str
) -> Path:
    """Writes a CPU benchmark's report (`report_path(name)`, tagged with this CPU and an
    `--only` run's workloads): `# title, date`, then the machine, its ISA, the commit and the
    command with its `--only` option (`how`: how it measured, in parentheses), then `body`."""
    from tunehub.worker.device import cpu_isa

    option, suffix = only_suffix(only)
    day = datetime.date.today().isoformat()
    header = (
        f"# {title}, {day}\n\n"
        f"Machine: {describe_machine()}; ISA {cpu_isa()}. Commit {git_commit()}. "
        f"`{command}{option}` ({how}).\n\n"
    )
    out = report_path(name, cpu_tag(cpu_isa().partition("+")[0]) + suffix)  # base: a file name
    out.write_text(header + body)
    print(f"wrote {out.relative_to(ROOT)}")
    return out
