"""Schemathesis against the running API: a uvicorn process with tokens, a real Redis and a
real database, every check (not only "no 5xx"), with bounded examples. The document must
describe every answer the server gives, errors included, and the server must take what the
document allows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.api.api_process import ApiProcess, api_env, uvicorn_factory
from tunehub.schemas.api import Scope
from tunehub.server.db import tokens
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope

CONFIG = Path(__file__).with_name("schemathesis.toml")
HOOKS = "tests.api.schemathesis_hooks"
ROOT = Path(__file__).resolve().parents[2]
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
MAX_EXAMPLES = 10
SEED = 20261125
RUN_TIMEOUT_S = 300


def _admin_secret(database_url: str) -> str:
    engine = make_engine(database_url)
    try:
        with session_scope(session_factory(engine)) as s:
            return tokens.create_token(s, name="schemathesis", scope=Scope.ADMIN)[1]
    finally:
        engine.dispose()


def test_the_api_conforms_to_its_openapi_document(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    migrate(database_url)
    secret = _admin_secret(database_url)
    env = api_env(tmp_path / "home", database_url, redis_url, auth="token")
    port = ApiProcess.free_port()
    with ApiProcess(uvicorn_factory(port), env, tmp_path / "api.log", port) as api:
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                *("--config-file", str(CONFIG)),
                *("run", f"{api.url}/openapi.json"),
                *("--header", f"Authorization: Bearer {secret}"),
                *("--checks", "all", "--workers", "1"),
                *("--phases", "examples,coverage,fuzzing"),
                *("--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED)),
            ],
            cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_HOOKS": HOOKS, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    # Every generated case passed every check (skipped ones aside: nothing failed).
    assert re.search(r"(\d+) generated, \1 passed", run.stdout), run.stdout[-3000:]
