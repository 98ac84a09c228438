"""The API under load: best-kernel lookups and status polling, requests per second and latency
at 50 concurrent connections.

    python bench/api_load.py                          # starts its own stack (a temporary home)
    python bench/api_load.py --api-workers 2 --duration 20
    python bench/api_load.py --server http://127.0.0.1:8000 --connections 50

Seeds one tuned workload (examples/matmul_128.json, a few trials through the real tuner and a
worker), then loads each scenario in turn, in the same run: `GET /healthz` (the framework's
floor: a constant, no database), the best kernel by workload key
(`GET /v1/workloads/{key}/best`, the hot path: cached response bytes) and by signature
(`POST /v1/workloads/best`: the signature is parsed and keyed every time); then what every
dashboard and `tunehub status --watch` polls, while a second tuning (examples/gelu.json, a
large budget) runs live, storing batches as the load goes on: that tuning's view
(`GET /v1/tunings/{id}`), the tunings' list (`GET /v1/tunings`), and the dashboard's list and
tuning pages (`GET /ui`, `GET /ui/tunings/{id}`). Each row's `vs best` is its rate over the
best-kernel lookup's.

The load comes from `wrk -t2 -c50` (Debian's package `wrk`) when it is on PATH: a C load
generator, so the rates are the server's, not the client's. Without it, `--clients` asyncio
tasks with an httpx client each do the same, far more slowly (the report says which). Loopback
only: the load generator and the server share this machine's cores, which the report says.
Every request says `Accept-Encoding: gzip`, as browsers and httpx (the SDK, the CLI) do: the
server gzips its large kept answers (a live tuning's page) for them.
Results go to docs/benchmarks/api_load-<date>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine, git_commit  # noqa: E402
from tunehub.client.sdk import Client  # noqa: E402
from tunehub.schemas.record import TuningStatus  # noqa: E402
from tunehub.server.standalone import Stack, StackConfig, session_members  # noqa: E402

EXAMPLE = ROOT / "examples" / "matmul_128.json"
LIVE_EXAMPLE = ROOT / "examples" / "gelu.json"
BEST = "GET /v1/workloads/{key}/best"
WARMUP_S = 2.0
# wrk's summary, as JSON on its last line: latencies in microseconds.
WRK_SCRIPT = """
wrk.method = %(method)s
wrk.body = %(body)s
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept-Encoding"] = "gzip"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %%d, "duration_us": %%d, "errors": %%d, "p50": %%d, "p90": %%d, '
    .. '"p99": %%d, "max": %%d}\\n',
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


@dataclass(frozen=True)
class Scenario:
    name: str
    method: str
    path: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class Result:
    scenario: str
    requests: int
    errors: int
    seconds: float
    percentiles_s: dict[str, float]  # p50, p90, p99, max
    server_cpu_s: float | None  # None: the server is not this machine's process (--server)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


class ServerCpu:
    """CPU time of the API's processes (its uvicorn workers included) between two points."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    def seconds(self) -> float | None:
        if self.pid is None:
            return None
        return sum(cpu_seconds(pid) or 0.0 for pid in [self.pid, *session_members(self.pid)])


def load_wrk(
    url: str,
    scenario: Scenario,
    *,
    threads: int,
    connections: int,
    duration_s: float,
    cpu: ServerCpu,
) -> Result:
    """`wrk -t{threads} -c{connections}` on `scenario` for `duration_s`, after a warm-up."""
    body = "nil" if scenario.body is None else json.dumps(json.dumps(scenario.body))
    script = WRK_SCRIPT % {"method": json.dumps(scenario.method), "body": body}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    try:

        def wrk(seconds: float) -> dict[str, Any]:
            command = [
                "wrk",
                *(f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s"),
                *("-s", file.name, url + scenario.path),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
            return summary

        wrk(WARMUP_S)
        before = cpu.seconds()
        summary = wrk(duration_s)
        after = cpu.seconds()
    finally:
        os.unlink(file.name)
    return Result(
        scenario.name,
        summary["requests"],
        summary["errors"],
        summary["duration_us"] / 1e6,
        {p: summary[p] / 1e6 for p in ("p50", "p90", "p99", "max")},
        None if before is None or after is None else after - before,
    )


async def load_python(
    url: str, scenario: Scenario, *, clients: int, duration_s: float, cpu: ServerCpu
) -> Result:
    """Without wrk: `clients` asyncio senders, each with an httpx client of its own and one
    keep-alive connection, as separate clients would (one client shared by all of them costs
    more in httpx's connection pool than the server spends on a request)."""
    latencies: list[float] = []
    errors = 0
    measuring = False

    async def sender(http: httpx.AsyncClient, deadline: float) -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            start = time.perf_counter()
            response = await http.request(scenario.method, scenario.path, json=scenario.body)
            if measuring:
                latencies.append(time.perf_counter() - start)
                errors += response.status_code != 200

    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    https = [httpx.AsyncClient(base_url=url, limits=one, timeout=30) for _ in range(clients)]
    try:
        await asyncio.gather(*(sender(http, time.monotonic() + WARMUP_S) for http in https))
        measuring = True
        started, before = time.perf_counter(), cpu.seconds()
        deadline = time.monotonic() + duration_s
        await asyncio.gather(*(sender(http, deadline) for http in https))
        seconds, after = time.perf_counter() - started, cpu.seconds()
    finally:
        for http in https:
            await http.aclose()
    ordered = sorted(latencies)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    percentiles = {"p50": at(50), "p90": at(90), "p99": at(99), "max": ordered[-1]}
    server = None if before is None or after is None else after - before
    return Result(scenario.name, len(latencies), errors, seconds, percentiles, server)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process `pid` so far (from /proc)."""
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


def start_live(url: str, trials: int) -> int:
    """Submit the live tuning and wait for its first stored batch: its id."""
    with Client(url) as client:
        submitted = client.submit(json.loads(LIVE_EXAMPLE.read_text()), target="cpu", trials=trials)
        deadline = time.monotonic() + 600
        while (view := client.get(submitted.id)).trials_done == 0:
            if view.status != TuningStatus.RUNNING and view.status != TuningStatus.QUEUED:
                raise SystemExit(f"the live tuning {view.id} ended: {view.status} {view.error}")
            if time.monotonic() > deadline:
                raise SystemExit(f"the live tuning {view.id} stored no batch in 600 s")
            time.sleep(0.5)
    return submitted.id


def live_trials_done(url: str, tuning_id: int) -> tuple[str, int]:
    with Client(url) as client:
        view = client.get(tuning_id)
    return str(view.status), view.trials_done


def scenarios(key: str, target: str, task: dict[str, Any], live: int) -> list[Scenario]:
    return [
        Scenario("GET /healthz", "GET", "/healthz"),
        # Quoted: a target with features (`cpu:x86_64-avx512+avx512_vnni`) has `+`, a space
        # in a query string.
        Scenario(BEST, "GET", f"/v1/workloads/{key}/best?target={quote(target, safe=':')}"),
        Scenario(
            "POST /v1/workloads/best",
            "POST",
            "/v1/workloads/best",
            {"task": task, "target": target},
        ),
        Scenario("GET /v1/tunings/{id} (live)", "GET", f"/v1/tunings/{live}"),
        Scenario("GET /v1/tunings", "GET", "/v1/tunings"),
        Scenario("GET /ui", "GET", "/ui"),
        Scenario("GET /ui/tunings/{id} (live)", "GET", f"/ui/tunings/{live}"),
    ]


def table(results: list[Result]) -> str:
    lines = [
        "| scenario | requests | errors | req/s | vs best | p50 | p90 | p99 | max "
        "| server CPU/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    best = next((r.rate for r in results if r.scenario == BEST), None)
    for r in results:
        ms = [f"{r.percentiles_s[p] * 1e3:.1f} ms" for p in ("p50", "p90", "p99", "max")]
        server = "-" if r.server_cpu_s is None else f"{r.server_cpu_s / r.requests * 1e6:.0f} µs"
        ratio = "-" if not best else f"{r.rate / best:.2f}x"
        lines.append(
            f"| `{r.scenario}` | {r.requests} | {r.errors} | {r.rate:.0f} | {ratio} | "
            + " | ".join(ms)
            + f" | {server} |"
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
    parser.add_argument("--api-workers", type=int, default=2, help="API processes of the stack")
    parser.add_argument("--connections", type=int, default=50, help="wrk's -c (or Python clients)")
    parser.add_argument("--threads", type=int, default=2, help="wrk's -t")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per scenario")
    parser.add_argument("--trials", type=int, default=8, help="trials of the seeded tuning")
    parser.add_argument(
        "--live-trials", type=int, default=5000, help="budget of the tuning run during the load"
    )
    parser.add_argument("--python", action="store_true", help="the Python load even with wrk")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    use_wrk = shutil.which("wrk") is not None and not args.python

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tunehub-api-load-") as home:
        stack = None
        url = args.server
        if url is None:
            config = StackConfig(
                home=Path(home),
                database_url=f"sqlite:///{home}/tunehub.db",
                api_workers=args.api_workers,
            )
            stack = Stack(config)
            stack.start()
            url = stack.url
        check_loopback(url)
        cpu = ServerCpu(stack.api.pid if stack and stack.api else None)
        try:
            key, target, task = seed(url, args.trials)
            live = start_live(url, args.live_trials)
            live_before = live_trials_done(url, live)
            results = []
            for scenario in scenarios(key, target, task, live):
                if use_wrk:
                    result = load_wrk(
                        url,
                        scenario,
                        threads=args.threads,
                        connections=args.connections,
                        duration_s=args.duration,
                        cpu=cpu,
                    )
                else:
                    result = asyncio.run(
                        load_python(
                            url,
                            scenario,
                            clients=args.connections,
                            duration_s=args.duration,
                            cpu=cpu,
                        )
                    )
                results.append(result)
                print(f"{scenario.name}: {result.rate:.0f} req/s", file=sys.stderr)
            live_after = live_trials_done(url, live)
        finally:
            if stack is not None:
                stack.stop()

    driver = (
        f"`wrk -t{args.threads} -c{args.connections} -d{args.duration:g}s` (wrk, Debian package; "
        "`Accept-Encoding: gzip`, as browsers send)"
        if use_wrk
        else f"{args.connections} asyncio clients (httpx, a keep-alive connection each; "
        "no wrk on this machine)"
    )
    workers = f"{args.api_workers} uvicorn worker process(es)" if not args.server else "given"
    command = "python bench/api_load.py " + " ".join(sys.argv[1:])
    report = "\n".join(
        [
            f"# API load: best-kernel lookups and status polling "
            f"({datetime.date.today().isoformat()})",
            "",
            f"- machine: {describe_machine()}",
            f"- commit: {git_commit()}",
            f"- Python {sys.version.split()[0]}",
            f"- server: {'given: ' + url if args.server else 'tunehub standalone stack'} "
            f"({workers}, SQLite, Redis, default settings: best lookups cached 2 s; "
            "status answers kept 0.5 s; the tuner and a worker beside it)",
            f"- load: {driver}, {args.duration:g} s per scenario after {WARMUP_S:g} s of warm-up, "
            "the scenarios one after the other in this run; loopback, on the same cores as "
            "the server",
            f"- seeded workload: {EXAMPLE.name}, {args.trials} trials, target {target}",
            f"- live tuning: {LIVE_EXAMPLE.name}, tuning {live} of {args.live_trials} trials, "
            f"{live_before[1]} done when the load began ({live_before[0]}), {live_after[1]} "
            f"when it ended ({live_after[0]}): its tuner and worker share the cores too",
            "- machine load average (1 min) before and after: "
            f"{load_before[0]:.2f}, {os.getloadavg()[0]:.2f} (other processes share the cores)",
            "",
            table(results),
            "",
            "Latency is wrk's (or the Python clients'), from sending a request to its answer. "
            "Server CPU/req is the API processes' CPU time over the run divided by its "
            "requests: what one core of the API serves (1 s / that), whatever else runs.",
            "",
            f"    {command}",
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
