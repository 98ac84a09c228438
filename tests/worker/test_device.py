"""Device detection: ISA from cpuinfo flags, which ISAs a host runs, the fingerprint."""

from __future__ import annotations

import pytest

from tunehub.schemas.target import CPU_ISAS, Target
from tunehub.worker import device

AVX512_FLAGS = {"sse2", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}


@pytest.mark.parametrize(
    ("machine", "flags", "isa"),
    [
        ("x86_64", AVX512_FLAGS, "x86_64-avx512"),
        ("x86_64", AVX512_FLAGS - {"avx512dq"}, "x86_64-avx2"),  # all four are needed
        ("x86_64", {"sse2", "avx2", "fma"}, "x86_64-avx2"),
        ("x86_64", {"sse2", "avx2"}, "x86_64"),  # AVX2 without FMA is not x86-64-v3
        ("x86_64", set(), "x86_64"),
        ("aarch64", {"fp", "asimd"}, "aarch64-neon"),
        # Features after the base, in their order, where its registers allow them.
        (
            "x86_64",
            AVX512_FLAGS | {"avx512_bf16", "avx512_vnni", "avx_vnni"},
            "x86_64-avx512+avx_vnni+avx512_vnni+avx512_bf16",
        ),
        (
            "x86_64",
            AVX512_FLAGS | {"amx_tile", "amx_bf16", "amx_int8", "avx512_fp16"},
            "x86_64-avx512+avx512_fp16+amx_tile+amx_bf16+amx_int8",
        ),
        ("x86_64", {"sse2", "avx2", "fma", "avx_vnni", "avx512_bf16"}, "x86_64-avx2+avx_vnni"),
        ("aarch64", {"fp", "avx512_bf16"}, "aarch64-neon"),
        ("riscv64", set(), "generic"),
    ],
)
def test_isa_from_flags(machine: str, flags: set[str], isa: str) -> None:
    assert device.isa_from_flags(machine, flags) == isa


def test_this_host_has_a_known_isa_and_runs_it() -> None:
    isa = device.cpu_isa()
    assert Target(kind="cpu", isa=isa).base in CPU_ISAS
    assert device.can_run(isa) and device.can_run("generic")


def test_the_isa_can_be_capped_but_never_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    host = device.cpu_isa()
    try:
        with monkeypatch.context() as env:
            env.setenv(device.ISA_ENV, "generic")
            device.cpu_isa.cache_clear()
            assert device.cpu_isa() == "generic"
            assert not device.can_run(host) or host == "generic"
            foreign = "aarch64-neon" if host.startswith("x86_64") else "x86_64-avx512"
            env.setenv(device.ISA_ENV, foreign)
            device.cpu_isa.cache_clear()
            with pytest.raises(RuntimeError, match="is not an ISA this"):
                device.cpu_isa()
    finally:
        device.cpu_isa.cache_clear()
    assert device.cpu_isa() == host


def test_x86_levels_run_downwards_only() -> None:
    assert device.can_run("x86_64", host="x86_64-avx2")
    assert device.can_run("x86_64-avx2", host="x86_64-avx512")
    assert not device.can_run("x86_64-avx512", host="x86_64-avx2")
    assert not device.can_run("x86_64-avx2", host="aarch64-neon")
    assert device.can_run("generic", host="aarch64-neon")


def test_a_feature_runs_only_where_the_host_has_it() -> None:
    host = "x86_64-avx512+avx512_vnni+avx512_bf16"
    assert device.can_run("x86_64-avx512+avx512_bf16", host=host)
    assert device.can_run("x86_64-avx2", host=host)
    assert not device.can_run("x86_64-avx512+avx512_bf16", host="x86_64-avx512")
    assert not device.can_run("x86_64-avx512+amx_tile+amx_bf16", host=host)
    assert not device.can_run("x86_64-avx2+avx_vnni", host=host)  # no AVX-VNNI there


def test_fingerprint_names_the_machine() -> None:
    fp = device.fingerprint(Target(kind="cpu", isa=device.cpu_isa()), threads=2)
    assert fp["threads"] == 2
    assert fp["cpu_isa"] == device.cpu_isa()
    assert fp["cpu_isa"] == "+".join([fp["cpu_isa"].split("+")[0], *fp["cpu_features"]])
    assert fp["cpu_cores"] >= 1
    assert fp["compiler"].startswith("gcc ") and fp["compiler"] != "gcc ?"
    for key in ("hostname", "os", "cpu_model"):
        assert isinstance(fp[key], str) and fp[key]
