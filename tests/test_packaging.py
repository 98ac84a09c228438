"""Packaging: the wheel installs `tunehub` alone, and the core (the SDK, `load_kernel`, the
CLI) imports without any extra; a command that needs one says which, in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What the extras install (`pyproject.toml`): the core must not import any of them.
EXTRAS_MODULES = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "rq",
    "redis",
    "xgboost",
    "psycopg",
    "prometheus_client",
    "pydantic_settings",
    "threadpoolctl",
    "cuda",
)
CORE_MODULES = (
    "tunehub.client.sdk",
    "tunehub.client.cli",
    "tunehub.runtime.load",
    "tunehub.runtime.dispatch",
)


def _without_extras(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run in a fresh interpreter in which every extra's module fails to import."""
    prelude = f"import sys\nfor name in {EXTRAS_MODULES!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_the_core_imports_without_any_extra() -> None:
    done = _without_extras(
        f"""
        import importlib
        for name in {CORE_MODULES!r}:
            importlib.import_module(name)
        from tunehub.client.sdk import Client
        from tunehub.runtime.load import load_kernel
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_command_that_needs_an_extra_names_it() -> None:
    done = _without_extras(
        """
        from tunehub.client.cli import main
        main(["kernel", "abc", "-o", "out"])
        """
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: this command needs tunehub[server] (sqlalchemy is not installed): "
        "pip install 'tunehub[server]'\n"
    )


def test_a_linked_folder_refuses_its_own_name() -> None:
    """`import server` from a checkout would load a second copy of every module of
    `tunehub.server`: each folder `tunehub/` links to refuses, naming the right import."""
    linked = sorted(path.name for path in (ROOT / "tunehub").iterdir() if path.is_symlink())
    code = f"""
        import importlib
        for name in {linked!r}:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                print(exc)
            else:
                print(name, "imported")
        """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"import it as tunehub.{name}, not {name}" for name in linked
    ]
    assert "server" in linked  # the links are there: without them this would test nothing


def test_the_wheel_installs_tunehub_alone(tmp_path: Path) -> None:
    """Built from a copy of what the Dockerfile copies, so that no build output lands in the
    checkout."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for path in ROOT.joinpath("tunehub").iterdir():
        if path.is_symlink():  # a link to a top-level folder: copy the folder too
            shutil.copytree(ROOT / path.name, source / path.name, ignore=_caches)
    shutil.copytree(ROOT / "tunehub", source / "tunehub", symlinks=True, ignore=_caches)
    wheel_of = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(
        [*wheel_of, str(source), "-w", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("tunehub-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {
        "tunehub",
        wheel.name.split("-py3")[0] + ".dist-info",
    }
    assert "tunehub/migrations/versions/0006_record_devices.py" in names
    assert "tunehub/client/sdk.py" in names


def _caches(directory: str, names: list[str]) -> list[str]:
    return [
        name for name in names if name in ("__pycache__", "build") or name.endswith(".egg-info")
    ]
