"""Malformed signatures are refused before anything runs: `tunehub validate` and `tunehub tune`
exit 2 with one line, `error: <reason>`, and compile, measure and store nothing.

Each case is a file handed to the installed console script in a subprocess, as a user would.
"Nothing compiled" is checked directly: `gcc` on the subprocess's PATH is a stub that leaves a
mark when called (a control case shows that a valid signature does call it); TMPDIR and the
kernel cache start empty and must stay so, and the database, migrated beforehand, must stay
empty.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tunehub.server.db.session import migrate

TUNEHUB = Path(sys.executable).parent / "tunehub"  # `pip install -e .` puts it beside python

VALID: dict[str, Any] = {
    "version": 1,
    "name": "mm",
    "inputs": [
        {"name": "A", "shape": [8, 4], "dtype": "float32"},
        {"name": "B", "shape": [4, 6], "dtype": "float32"},
    ],
    "computes": [
        {"name": "C", "axes": ["i", "j"], "shape": [8, 6], "dtype": "float32",
         "reduce": {"op": "sum", "axes": {"k": 4}}, "expr": "A[i, k] * B[k, j]"},
    ],
    "outputs": ["C"],
}  # fmt: skip


def _edit(change: Callable[[dict[str, Any]], object]) -> str:
    """VALID after `change` (which edits it in place), as JSON text."""
    signature = copy.deepcopy(VALID)
    change(signature)
    return json.dumps(signature)


def _expr(expr: str) -> str:
    return _edit(lambda s: s["computes"][0].update(expr=expr))


def _input(**fields: Any) -> str:
    return _edit(lambda s: s["inputs"][0].update(fields))


# name -> (file contents, a fragment the one-line reason must contain)
CASES: dict[str, tuple[str | bytes, str]] = {
    "not_json": ("{not json", "invalid JSON"),
    "empty_file": ("", "invalid JSON"),
    "not_utf8": (b"\xff\xfe{}", "invalid JSON"),
    "not_an_object": ("[1, 2, 3]", "a task signature is a JSON object"),
    "json_nested_10^6_deep": ("[" * 10**6 + "]" * 10**6, "nested too deeply"),
    "wrong_version": (_edit(lambda s: s.update(version=3)), "version"),
    "missing_field": (_edit(lambda s: s.pop("computes")), "computes"),
    "unknown_field": (_edit(lambda s: s.update(code="import os")), "code"),
    "unknown_function": (_expr("foo(A[i, k]) * B[k, j]"), "foo"),
    "import_injection": (_expr("__import__('os').system('touch PWNED')"), "character"),
    "dunder_call": (_expr("__import__(A[i, k])"), "__import__"),
    "eval_call": (_expr("eval(A[i, k])"), "eval"),
    "statement_injection": (_expr("A[i, k] * B[k, j]; import os"), ";"),
    "attribute_injection": (_expr("A.__class__.__mro__"), "."),
    "injected_tensor_name": (_input(name="A; rm -rf ~"), "inputs.0.name"),
    "injected_axis_name": (
        _edit(lambda s: s["computes"][0].update(axes=["i; rm -rf ~", "j"])),
        "not an identifier",
    ),
    "parentheses_10^6_deep": (_expr("(" * 10**6 + "A[i, k]" + ")" * 10**6), "4096 characters"),
    "parentheses_2000_deep": (_expr("(" * 2000 + "A[i, k]" + ")" * 2000), "nest"),
    "shape_10^12_elements": (_input(shape=[10**6, 10**6]), "over the limit"),
    "symbol_max_over_limit": (
        _edit(lambda s: s.update(symbols={"M": {"min": 1, "max": 2**40}})),
        "over the limit",
    ),
    "self_reference": (_expr("A[i, k] * C[k, j]"), "reads itself"),
    "read_out_of_bounds": (_expr("A[i + 1, k] * B[k, j]"), "guard"),
    "read_always_out_of_bounds": (_expr("where(i < 0, A[i + 100, k], 0.0)"), "always outside"),
    "negative_extent": (_input(shape=[-3, 4]), "positive"),
    "undeclared_symbol": (_input(shape=["N", 4]), "'N'"),
    "unknown_dtype": (_input(dtype="float8"), "dtype"),
    "wrong_rank": (_expr("A[i] * B[k, j]"), "A"),
}


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Any]:
    """A working directory, an empty TMPDIR and kernel cache, a `gcc` stub that marks its
    calls, and a migrated, empty SQLite database."""
    tmp, cache, bin_dir = tmp_path / "tmp", tmp_path / "cache", tmp_path / "bin"
    for folder in (tmp, cache, bin_dir):
        folder.mkdir()
    marker = tmp_path / "gcc-was-called"
    stub = bin_dir / "gcc"
    stub.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    stub.chmod(0o755)
    db = f"sqlite:///{tmp_path / 'tunehub.db'}"
    migrate(db)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "TMPDIR": str(tmp),
        "TUNEHUB_CACHE_DIR": str(cache),
    }
    return {"cwd": tmp_path, "tmp": tmp, "cache": cache, "marker": marker, "db": db, "env": env}


def _tunehub(sandbox: dict[str, Any], *args: str | Path) -> subprocess.CompletedProcess[str]:
    assert TUNEHUB.exists(), "run `.venv/bin/pip install -e '.[dev]'` to get the console script"
    return subprocess.run(
        [str(TUNEHUB), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=sandbox["cwd"],
        env=sandbox["env"],
    )


def _rows(db: str) -> dict[str, int]:
    engine = create_engine(db)
    try:
        with engine.connect() as connection:
            return {
                table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in ("workloads", "tunings", "records", "artifacts")
            }
    finally:
        engine.dispose()


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_signature_exits_2_in_one_line_and_runs_nothing(
    case: str, sandbox: dict[str, Any]
) -> None:
    contents, fragment = CASES[case]
    path = sandbox["cwd"] / "signature.json"
    if isinstance(contents, bytes):
        path.write_bytes(contents)
    else:
        path.write_text(contents)
    for args in (
        ("validate", path),
        ("tune", path, "--trials", "1", "--db", sandbox["db"]),
    ):
        done = _tunehub(sandbox, *args)
        output = done.stdout + done.stderr
        assert done.returncode == 2, f"{args[0]}: exit {done.returncode}: {output}"
        lines = output.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{args[0]}: {output}"
        assert fragment in lines[0], f"{args[0]}: {lines[0]}"
    assert not sandbox["marker"].exists(), "gcc was called"
    assert not any(sandbox["tmp"].iterdir()), list(sandbox["tmp"].iterdir())
    assert not any(sandbox["cache"].iterdir()), list(sandbox["cache"].iterdir())
    assert set(_rows(sandbox["db"]).values()) == {0}
    assert not (sandbox["cwd"] / "PWNED").exists()


def test_a_valid_signature_does_reach_the_compiler(sandbox: dict[str, Any]) -> None:
    """The control: the checks above would see a compilation and a stored tuning."""
    path = sandbox["cwd"] / "signature.json"
    path.write_text(json.dumps(VALID))
    done = _tunehub(sandbox, "tune", path, "--trials", "1", "--db", sandbox["db"], "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failures"] == {"compile_error": 1}
    assert sandbox["marker"].exists()
    rows = _rows(sandbox["db"])
    assert rows["workloads"] == rows["tunings"] == rows["records"] == 1
