"""Best-kernel lookups under load: requests per second and latency at 50 concurrent clients.

    python bench/api_load.py                          # starts its own stack (a temporary home)
    python bench/api_load.py --server http://127.0.0.1:8000 --clients 50 --requests 20000

Seeds one tuned workload (examples/matmul_128.json, a few trials through the real tuner and a
worker), then, for each scenario, runs `--clients` asyncio tasks, each with its own httpx
client and keep-alive connection, that send requests back to back until `--requests` have
been answered or `--duration` seconds have passed, after a short warm-up. Loopback only: the
load generator and the server share this machine's cores, which the report says. Results go
to docs/benchmarks/api_load-<date>.md.

Scenarios: `GET /healthz` (the framework's floor: a constant, no database), the best kernel
by workload key (`GET /v1/workloads/{key}/best`, the hot path, served from the lookup cache)
and by signature (`POST /v1/workloads/best`: the signature is parsed and keyed every time).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine, git_commit  # noqa: E402
from tunehub.client.sdk import Client  # noqa: E402
from tunehub.schemas.record import TuningStatus  # noqa: E402
from tunehub.server.standalone import Stack, StackConfig  # noqa: E402

EXAMPLE = ROOT / "examples" / "matmul_128.json"
WARMUP_S = 1.0


@dataclass(frozen=True)
class Scenario:
    name: str
    send: Callable[[httpx.AsyncClient], Coroutine[Any, Any, httpx.Response]]


@dataclass(frozen=True)
class Result:
    scenario: str
    requests: int
    errors: int
    seconds: float
    latencies_s: list[float]
    client_cpu_s: float
    server_cpu_s: float | None  # None: the server is another machine's process (--server)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def load(
    url: str,
    scenario: Scenario,
    *,
    clients: int,
    requests: int,
    duration_s: float,
    server_pid: int | None,
) -> Result:
    """`clients` concurrent senders of `scenario` until `requests` or `duration_s`.

    Each sender has an httpx client of its own, with one keep-alive connection, as separate
    clients would: one client shared by all of them costs more in httpx's connection pool
    than the server spends on a request (a third of the rate at 50 connections, measured).
    """
    latencies: list[float] = []
    errors = 0
    measuring = False
    sent = 0

    async def sender(http: httpx.AsyncClient, deadline: float) -> None:
        nonlocal errors, sent
        while time.monotonic() < deadline and (not measuring or sent < requests):
            if measuring:
                sent += 1
            start = time.perf_counter()
            response = await scenario.send(http)
            elapsed = time.perf_counter() - start
            if measuring:
                latencies.append(elapsed)
                errors += response.status_code != 200

    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    https = [httpx.AsyncClient(base_url=url, limits=one, timeout=30) for _ in range(clients)]
    try:
        warmup = time.monotonic() + WARMUP_S
        await asyncio.gather(*(sender(http, warmup) for http in https))
        measuring = True
        started, client_cpu = time.perf_counter(), time.process_time()
        server_cpu = cpu_seconds(server_pid)
        deadline = time.monotonic() + duration_s
        await asyncio.gather(*(sender(http, deadline) for http in https))
        seconds = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu
        server_after = cpu_seconds(server_pid)
    finally:
        for http in https:
            await http.aclose()
    server = None if server_cpu is None or server_after is None else server_after - server_cpu
    return Result(scenario.name, len(latencies), errors, seconds, latencies, client_cpu, server)


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of process `pid` so far (from /proc)."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def seed(url: str, trials: int) -> tuple[str, str, dict[str, Any]]:
    """Tune the example (or find it tuned): its workload key, target and signature."""
    task = json.loads(EXAMPLE.read_text())
    with Client(url) as client:
        submitted = client.submit(task, target="cpu", trials=trials)
        tuning = client.wait(submitted.id, timeout_s=600)
        if tuning.status != TuningStatus.DONE or tuning.best is None:
            raise SystemExit(f"seeding failed: tuning {tuning.id} {tuning.status}: {tuning.error}")
        client.best(tuning.workload_key, target=tuning.target)
    return tuning.workload_key, tuning.target, task


def scenarios(key: str, target: str, task: dict[str, Any]) -> list[Scenario]:
    body = {"task": task, "target": target}
    return [
        Scenario("GET /healthz", lambda http: http.get("/healthz")),
        Scenario(
            "GET /v1/workloads/{key}/best",
            lambda http: http.get(f"/v1/workloads/{key}/best", params={"target": target}),
        ),
        Scenario(
            "POST /v1/workloads/best",
            lambda http: http.post("/v1/workloads/best", json=body),
        ),
    ]


def table(results: list[Result]) -> str:
    lines = [
        "| scenario | requests | errors | req/s | p50 | p90 | p99 | max "
        "| server CPU/req | client CPU/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ms = [f"{r.percentile(p) * 1e3:.1f} ms" for p in (50, 90, 99)]
        server = "-" if r.server_cpu_s is None else f"{r.server_cpu_s / r.requests * 1e6:.0f} µs"
        lines.append(
            f"| `{r.scenario}` | {r.requests} | {r.errors} | {r.rate:.0f} | "
            + " | ".join(ms)
            + f" | {max(r.latencies_s) * 1e3:.1f} ms | {server} "
            f"| {r.client_cpu_s / r.requests * 1e6:.0f} µs |"
        )
    return "\n".join(lines)


def check_loopback(url: str) -> None:
    """Refuse anything but this machine: a load test never leaves it."""
    host = urlsplit(url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise SystemExit(f"refusing to load {host!r}: only loopback servers are benchmarked")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", help="a running server (default: start a stack here)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20_000, help="per scenario, at most")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario, max")
    parser.add_argument("--trials", type=int, default=8, help="trials of the seeded tuning")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tunehub-api-load-") as home:
        stack = None
        url = args.server
        if url is None:
            config = StackConfig(home=Path(home), database_url=f"sqlite:///{home}/tunehub.db")
            stack = Stack(config)
            stack.start()
            url = stack.url
        check_loopback(url)
        try:
            key, target, task = seed(url, args.trials)
            results = []
            for scenario in scenarios(key, target, task):
                result = asyncio.run(
                    load(
                        url,
                        scenario,
                        clients=args.clients,
                        requests=args.requests,
                        duration_s=args.duration,
                        server_pid=stack.api.pid if stack and stack.api else None,
                    )
                )
                results.append(result)
                print(f"{scenario.name}: {result.rate:.0f} req/s", file=sys.stderr)
        finally:
            if stack is not None:
                stack.stop()

    report = "\n".join(
        [
            f"# API load: best-kernel lookups ({datetime.date.today().isoformat()})",
            "",
            f"- machine: {describe_machine()}",
            f"- commit: {git_commit()}",
            f"- Python {sys.version.split()[0]}, httpx {httpx.__version__}",
            f"- server: {'given: ' + url if args.server else 'tunehub standalone stack'} "
            "(uvicorn, one process, SQLite, default settings: best lookups cached 2 s)",
            f"- load: {args.clients} concurrent clients (asyncio, an httpx client and a "
            "keep-alive connection each), "
            f"up to {args.requests} requests or {args.duration:g} s per scenario after "
            f"{WARMUP_S:g} s of warm-up; loopback, on the same cores as the server",
            f"- seeded workload: {EXAMPLE.name}, {args.trials} trials, target {target}",
            "- machine load average (1 min) before and after: "
            f"{load_before[0]:.2f}, {os.getloadavg()[0]:.2f} (other processes share the cores)",
            "",
            table(results),
            "",
            "Latency is from the client's side (queueing in the client included). The load "
            "generator is itself Python on the same cores, so these rates are lower bounds of "
            "what the server alone would sustain; the API process's CPU time per request "
            "(server CPU/req) says what one core of it can serve (1 s / that), whatever else "
            "runs. One run; percentiles over every request of it.",
            "",
            "    python bench/api_load.py",
            "",
        ]
    )
    print(table(results))
    if not args.no_write:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"api_load-{datetime.date.today().isoformat()}.md"
        path.write_text(report)
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
