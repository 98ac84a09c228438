"""`--symbol NAME=V1,V2,...`: the one parser every command shares, the tasks its lists make, and
the one-line errors the commands give for bad ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunehub.client.commands.common import (
    UserError,
    parse_symbol_values,
    parse_symbols,
    parse_weights,
    symbol_tasks,
)
from tunehub.schemas.signature import TaskSignature

TUNEHUB = Path(sys.executable).parent / "tunehub"


def signature(name: str, **symbols: tuple[int, int]) -> TaskSignature:
    """A tiny elementwise task over the named symbols (one input axis each)."""
    shape: list[int | str] = [*symbols] or [4]
    return TaskSignature.model_validate(
        {
            "name": name,
            "symbols": {s: {"min": lo, "max": hi} for s, (lo, hi) in symbols.items()},
            "inputs": [{"name": "X", "shape": shape, "dtype": "float32"}],
            "computes": [
                {
                    "name": "Y",
                    "axes": [f"a{i}" for i in range(len(shape))],
                    "shape": shape,
                    "dtype": "float32",
                    "expr": f"X[{', '.join(f'a{i}' for i in range(len(shape)))}] * 2.0",
                }
            ],
            "outputs": ["Y"],
        }
    )


def test_lists_and_single_values() -> None:
    assert parse_symbol_values(("M=1,8, 32", "N=4")) == {"M": [1, 8, 32], "N": [4]}
    assert parse_symbols(("M=64", "N=-3")) == {"M": 64, "N": -3}
    assert parse_symbols(()) == {}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("M",), "NAME=INTEGER"),
        (("M=",), "NAME=INTEGER"),
        (("M=1,,8",), "NAME=INTEGER"),
        (("M=1.5",), "NAME=INTEGER"),
        (("=4",), "NAME=INTEGER"),
        (("M=1", "M=8"), "given twice"),
        (("M=8,1,8",), "lists a value twice"),
    ],
)
def test_malformed_arguments(args: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        parse_symbol_values(args)


def test_commands_naming_one_kernel_refuse_lists() -> None:
    with pytest.raises(UserError, match="--symbol M takes one value here"):
        parse_symbols(("M=1,8",))


def test_the_tasks_are_the_product_of_the_lists_per_signature() -> None:
    mm = signature("mm", M=(1, 4096), N=(1, 64))
    norm = signature("norm", M=(1, 4096))
    fixed = signature("fixed")
    tasks = symbol_tasks([mm, norm, fixed], ("M=1,8", "N=16,32"))
    assert tasks == [
        (0, {"M": 1, "N": 16}),
        (0, {"M": 1, "N": 32}),
        (0, {"M": 8, "N": 16}),
        (0, {"M": 8, "N": 32}),
        (1, {"M": 1}),
        (1, {"M": 8}),
        (2, {}),
    ]
    assert symbol_tasks([mm], ()) == [(0, {})]  # the tuner's defaults: one task


def test_unknown_symbols_and_values_outside_a_range_are_refused() -> None:
    mm = signature("mm", M=(1, 128))
    with pytest.raises(UserError, match=r"unknown symbol K \(declared: M\)"):
        symbol_tasks([mm], ("K=1",))
    with pytest.raises(UserError, match=r"mm: symbol M=1000 is outside its range \[1, 128\]"):
        symbol_tasks([mm], ("M=1,1000",))


def test_weights() -> None:
    assert parse_weights(None, 2) == [1.0, 1.0]
    assert parse_weights("1,2.5", 2) == [1.0, 2.5]
    for text, fragment in (("1", "1 values for 2"), ("1,x", "numbers"), ("1,nan", "positive")):
        with pytest.raises(UserError, match=fragment):
            parse_weights(text, 2)


def assert_user_error(args: list[str], fragment: str) -> None:
    done = subprocess.run([str(TUNEHUB), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert fragment in lines[0], lines[0]


def test_commands_give_one_error_line_and_exit_2(tmp_path: Path) -> None:
    """Checked before any database, tuning or server is touched."""
    path = tmp_path / "sig.json"
    path.write_text(signature("mm", M=(1, 128)).model_dump_json())
    db = f"sqlite:///{tmp_path / 'never.db'}"
    tune = ["tune", str(path), "--db", db]
    assert_user_error([*tune, "--symbol", "M=1,1000"], "symbol M=1000 is outside its range")
    assert_user_error([*tune, "--symbol", "M=1,x"], "NAME=INTEGER[,INTEGER...]")
    assert_user_error([*tune, "--symbol", "N=1,2"], "unknown symbol N (declared: M)")
    server = ["--server", "http://127.0.0.1:9"]  # never reached
    submit = ["submit", str(path), *server]
    assert_user_error([*submit, "--symbol", "M=0,8"], "symbol M=0 is outside its range")
    assert_user_error([*submit, "--symbol", "M=1,8", "--weights", "1,2"], "2 values for 1")
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x"}))
    assert_user_error(["submit", str(tmp_path / "bad.json"), *server], "invalid signature")
    key = "0" * 64
    assert_user_error(["download", key, "-o", str(tmp_path), "--symbol", "M=1,2", *server],
                      "takes one value here")  # fmt: skip
    assert_user_error(["download", key, "-o", str(tmp_path), "--dispatch", "--symbol", "M=1",
                       *server], "leave --symbol out")  # fmt: skip
    assert not (tmp_path / "never.db").exists()
