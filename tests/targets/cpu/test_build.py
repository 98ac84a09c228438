"""The gcc builder: artifacts, compiler errors with their log, timeouts, ISA flags."""

from __future__ import annotations

import hashlib

import pytest

from tunehub.compiler.kernel import Kernel
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cpu.build import CpuBuilder
from tunehub.worker.build.builder import truncate

AVX512 = Target(kind="cpu", isa="x86_64-avx512")
AVX2 = Target(kind="cpu", isa="x86_64-avx2")


def kernel(source: str) -> Kernel:
    return Kernel(language="c", source=source, entry="k", args=(), symbols=())


def test_builds_a_shared_object_with_its_hash() -> None:
    result = CpuBuilder().build(kernel("int k(void) { return 0; }"), AVX512, timeout_s=60)
    assert result.status is RecordStatus.OK, result.log
    assert result.artifact is not None and result.artifact.startswith(b"\x7fELF")
    assert result.sha256 == hashlib.sha256(result.artifact).hexdigest()
    assert result.build_time_s > 0
    assert "-fopenmp" in result.stats["flags"]
    assert result.stats["artifact_bytes"] == len(result.artifact)


def test_a_syntax_error_is_a_compile_error_with_the_log() -> None:
    result = CpuBuilder().build(kernel("int k(void) { return 0 }"), AVX512, timeout_s=60)
    assert result.status is RecordStatus.COMPILE_ERROR
    assert result.artifact is None and result.sha256 is None
    assert "kernel.c:1:" in result.log and "error" in result.log


def test_a_slow_compile_is_killed_at_the_timeout() -> None:
    # A million dependent statements: gcc -O3 needs far longer than the timeout.
    source = """
    #define A x = x * 3 + 1;
    #define B A A A A A A A A A A
    #define C B B B B B B B B B B
    #define D C C C C C C C C C C
    #define E D D D D D D D D D D
    #define F E E E E E E E E E E
    int k(void) { volatile int x = 0; F F F F F F F F F F return x; }
    """
    result = CpuBuilder().build(kernel(source), AVX512, timeout_s=0.5)
    assert result.status is RecordStatus.COMPILE_TIMEOUT
    assert "timed out after 0.5 s" in result.log


@pytest.mark.parametrize(
    ("target", "required", "forbidden"),
    [
        (AVX512, ["__AVX512F__", "__AVX512BW__", "__AVX512VL__", "__AVX512DQ__", "__FMA__"], []),
        (AVX2, ["__AVX2__", "__FMA__"], ["__AVX512F__"]),
        (
            Target(kind="cpu", isa="x86_64-avx512+avx512_vnni+avx512_bf16"),
            ["__AVX512F__", "__AVX512VNNI__", "__AVX512BF16__"],
            ["__AMX_TILE__", "__AVX512FP16__"],
        ),
        (Target(kind="cpu", isa="x86_64-avx2+avx_vnni"), ["__AVXVNNI__"], ["__AVX512F__"]),
        (
            Target(kind="cpu", isa="x86_64-avx512+amx_tile+amx_bf16+amx_int8"),
            ["__AMX_TILE__", "__AMX_BF16__", "__AMX_INT8__"],
            ["__AVX512BF16__"],
        ),
    ],
)
def test_isa_flags_follow_the_target(
    target: Target, required: list[str], forbidden: list[str]
) -> None:
    checks = [f"#ifndef {m}\n#error missing {m}\n#endif" for m in required]
    checks += [f"#ifdef {m}\n#error unexpected {m}\n#endif" for m in forbidden]
    source = "\n".join([*checks, "int k(void) { return 0; }"])
    result = CpuBuilder().build(kernel(source), target, timeout_s=60)
    assert result.status is RecordStatus.OK, result.log


def test_long_logs_keep_head_and_tail() -> None:
    log = "first error\n" + "x" * 100_000 + "\nlast line"
    cut = truncate(log, limit=1000)
    assert len(cut) < 1100
    assert cut.startswith("first error") and cut.endswith("last line")
