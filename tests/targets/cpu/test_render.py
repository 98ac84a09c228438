"""The C renderer on hand-built loop IR: explicit vectors and register tiles, per-thread
workspaces, 16-bit float conversions, name mangling, constants, and the OpenMP pragmas."""

from __future__ import annotations

import _ctypes
import ctypes
import os
from pathlib import Path

import ml_dtypes
import numpy as np

from tests.compiler.cbuild import HOST, HOST_FLOAT_LANES, call, compile_for
from tunehub.compiler.backend import render
from tunehub.compiler.ir import Binary, Call, Cast, Const, Load, Var
from tunehub.compiler.loop import (
    Assign,
    Buffer,
    Decl,
    For,
    Function,
    Stmt,
    Store,
    Workspace,
    add,
    const,
    mul,
    seq,
    var,
)
from tunehub.compiler.lower import kernel_of

# The host's widest float vector: these kernels run here, so they use no wider one.
LANES = HOST_FLOAT_LANES
F32xN = f"float32x{LANES}"


def test_register_tile_microkernel() -> None:
    """C[8, 32] = A[8, K] @ B[K, 32] held in 8 rows of 32 / LANES vectors: the shape of a
    contraction microkernel (vector loads, broadcasts, fma, a register-tile array)."""
    i, j, k = var("i"), var("j"), var("k")
    tile = Load("c", (i, j), F32xN)
    b = Load("B", (k, mul(j, const(LANES))), F32xN)
    a = Cast(F32xN, Load("A", (i, k), "float32"))
    hsum = Call("hsum", (Load("c", (i, const(0)), F32xN),), "float32")
    lane = Call("lane", (Load("c", (i, const(1)), F32xN), const(3)), "float32")
    zero = Cast(F32xN, Const(0.0, "float32"))
    body = seq(
        Decl("c", F32xN, (8, 32 // LANES)),
        _tile_loops(Store("c", (i, j), zero)),
        For("k", var("K"), _tile_loops(Store("c", (i, j), Call("fma", (a, b, tile), F32xN)))),
        _tile_loops(Store("C", (i, mul(j, const(LANES))), tile)),
        For("i", const(8), Store("rowsum", (i,), Binary("+", hsum, lane, "float32"))),
    )
    fn = Function(
        "tile",
        (Buffer("A", "float32", (8, "K")), Buffer("B", "float32", ("K", 32))),
        (Buffer("C", "float32", (8, 32)), Buffer("rowsum", "float32", (8,))),
        ("K",),
        body,
    )
    rng = np.random.default_rng(0)
    A = rng.standard_normal((8, 13), dtype=np.float32)
    B = rng.standard_normal((13, 32), dtype=np.float32)
    C, rowsum = np.full((8, 32), np.nan, np.float32), np.zeros(8, np.float32)
    kernel = kernel_of(fn)
    assert f"__attribute__((vector_size({4 * LANES})))" in kernel.source
    assert call(kernel, {"A": A, "B": B, "C": C, "rowsum": rowsum}, {"K": 13}) == 0
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    expected = C[:, :LANES].sum(1) + C[:, LANES + 3]
    np.testing.assert_allclose(rowsum, expected, rtol=1e-5, atol=1e-5)


def _tile_loops(body: Stmt) -> Stmt:
    return For("i", const(8), For("j", const(32 // LANES), body, "unroll"), "unroll")


def _rows(name: str) -> Function:
    """Each row of X copied to a per-thread scratch buffer and summed from there into Y."""
    i, j = var("i"), var("j")
    acc = Var("s", "float64")
    update = Assign("s", Binary("+", acc, Load("scratch", (j,), "float32"), "float64"))
    row = seq(
        For("j", var("N"), Store("scratch", (j,), Load("X", (i, j), "float32"))),
        Decl("s", "float64", init=Const(0.0, "float64")),
        For("j", var("N"), update),
        Store("Y", (i,), acc),
    )
    return Function(
        name,
        (Buffer("X", "float32", ("M", "N")),),
        (Buffer("Y", "float64", ("M",)),),
        ("M", "N"),
        For("i", var("M"), row, "parallel"),
        (Workspace("scratch", "float32", ("N",), per_thread=True),),
    )


def test_per_thread_workspace_in_a_parallel_loop() -> None:
    """The scratch comes from the block the calling thread keeps between calls (not freed),
    which grows when a call needs more (here: wider rows)."""
    X = np.random.default_rng(1).standard_normal((37, 11), dtype=np.float32)
    Y = np.zeros(37)
    kernel = kernel_of(_rows("rows"))
    assert "omp_get_thread_num()" in kernel.source and "workspace(" in kernel.source
    assert "free(scratch_base);" not in kernel.source
    assert call(kernel, {"X": X, "Y": Y}, {"M": 37, "N": 11}) == 0
    np.testing.assert_allclose(Y, X.astype(np.float64).sum(1), rtol=1e-12)
    wide = np.random.default_rng(2).standard_normal((37, 3000), dtype=np.float32)
    assert call(kernel, {"X": wide, "Y": Y}, {"M": 37, "N": 3000}) == 0
    np.testing.assert_allclose(Y, wide.astype(np.float64).sum(1), rtol=1e-12)


def test_unloading_a_kernel_frees_the_scratch_it_kept() -> None:
    """A process that loads, calls and unloads kernels one after another (the measuring
    child) does not keep each one's scratch: 40 rounds of 4 MiB per thread stay within a
    few MiB of resident memory."""
    kernel = kernel_of(_rows("rows_unloaded"))
    path = compile_for(kernel, HOST.isa)
    wide = np.ones((1, 1 << 20), dtype=np.float32)
    Y = np.zeros(1)
    pointers = [ctypes.c_void_p(wide.ctypes.data), ctypes.c_void_p(Y.ctypes.data)]
    sizes = [ctypes.c_int64(1), ctypes.c_int64(1 << 20)]

    def resident() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)  # as the child: its pool outlives us
    before = resident()
    for _ in range(40):
        lib = ctypes.CDLL(str(path))
        assert getattr(lib, kernel.entry)(*pointers, *sizes) == 0
        _ctypes.dlclose(lib._handle)
    assert Y[0] == 1 << 20
    assert resident() - before < 64 << 20


def test_half_vectors_round_like_ml_dtypes() -> None:
    """Vector loads and stores of float16 and bfloat16 buffers, and scalar casts."""
    i = var("i")
    special = [0.0, -0.0, 1.0, 65504.0, 65520.0, 1e-8, 6e-8, -3e38, np.inf, -np.inf]
    values = np.concatenate([special, np.random.default_rng(2).standard_normal(6) * 100])
    X = values.astype(np.float32)
    halves = [("H", "float16"), ("G", "bfloat16")]
    body: list[Stmt] = []
    for start in range(0, 16, LANES):
        vector = Cast(F32xN, Load("X", (const(start),), F32xN))
        body += [Store(name, (const(start),), vector) for name, _ in halves]
    for name, dtype in halves:
        halved = Binary("*", Load(name, (i,), dtype), Const(0.5, "float32"), "float32")
        body.append(For("i", const(16), Store(f"{name}2", (i,), Cast(dtype, halved))))
    outputs = [*halves, ("H2", "float16"), ("G2", "bfloat16")]
    fn = Function(
        "halves",
        (Buffer("X", "float32", (16,)),),
        tuple(Buffer(n, d, (16,)) for n, d in outputs),
        (),
        seq(body),
    )
    out = {
        "H": np.zeros(16, np.float16),
        "G": np.zeros(16, ml_dtypes.bfloat16),
        "H2": np.zeros(16, np.float16),
        "G2": np.zeros(16, ml_dtypes.bfloat16),
    }
    assert call(kernel_of(fn), {"X": X, **out}, {}) == 0
    with np.errstate(all="ignore"):
        expect_h, expect_g = X.astype(np.float16), X.astype(ml_dtypes.bfloat16)
    assert out["H"].tobytes() == expect_h.tobytes()
    assert out["G"].tobytes() == expect_g.tobytes()
    half_h = (expect_h.astype(np.float32) * np.float32(0.5)).astype(np.float16)
    half_g = (expect_g.astype(np.float32) * np.float32(0.5)).astype(ml_dtypes.bfloat16)
    assert out["H2"].tobytes() == half_h.tobytes()
    assert out["G2"].tobytes() == half_g.tobytes()


def test_vector_max_and_min_keep_the_scalar_semantics() -> None:
    """Vector max/min (a compare and a bit select) give what the scalar helpers give, lane
    for lane: a NaN on either side comes out (as numpy's maximum), ties (+0 and -0) take `y`;
    integer lanes likewise."""
    i = var("i")
    cases = [("float32", F32xN), ("int32", f"int32x{LANES}")]
    body: list[Stmt] = []
    for dtype, vt in cases:
        for fn in ("max", "min"):
            for start in range(0, 16, LANES):
                at = (const(start),)
                x, y = Load(f"X{dtype}", at, vt), Load(f"Y{dtype}", at, vt)
                body.append(Store(f"{fn}{dtype}", at, Call(fn, (x, y), vt)))
                scalar = Call(
                    fn, (Load(f"X{dtype}", (i,), dtype), Load(f"Y{dtype}", (i,), dtype)), dtype
                )
            body.append(For("i", const(16), Store(f"{fn}{dtype}_scalar", (i,), scalar)))
    inputs = tuple(Buffer(f"{side}{d}", d, (16,)) for d, _ in cases for side in "XY")
    outputs = tuple(
        Buffer(f"{fn}{d}{suffix}", d, (16,))
        for d, _ in cases
        for fn in ("max", "min")
        for suffix in ("", "_scalar")
    )
    fn = Function("selects", inputs, outputs, (), seq(body))
    nan = np.nan
    arrays = {
        "Xfloat32": np.array(
            [1, nan, 2, nan, -0.0, 0.0, 3, -3, 5, 7, -1, 0, 4, nan, 8, 9], np.float32
        ),
        "Yfloat32": np.array(
            [2, 1, nan, nan, 0.0, -0.0, 3, 3, -5, 7, -2, 1, 4, 0, -8, 9], np.float32
        ),
        "Xint32": np.arange(-8, 8, dtype=np.int32) * 3,
        "Yint32": np.arange(8, -8, -1, dtype=np.int32) * 2,
    }
    out = {b.name: np.zeros(16, b.dtype) for b in outputs}
    assert call(kernel_of(fn), {**arrays, **out}, {}) == 0
    for d, _ in cases:
        for name in ("max", "min"):
            vector_bits, scalar_bits = out[f"{name}{d}"], out[f"{name}{d}_scalar"]
            assert vector_bits.tobytes() == scalar_bits.tobytes(), (name, d)
    assert np.isnan(out["maxfloat32"][[1, 2, 3, 13]]).all() and out["maxfloat32"][8] == 5
    assert np.signbit(out["maxfloat32"][5]) and not np.signbit(out["maxfloat32"][4])


def test_a_vector_store_to_float16_rounds_once() -> None:
    """`float16(x * 3)` stored to a float16 buffer: the store's own conversion is the one
    rounding (no round trip before it), and the bits are numpy's."""
    body = [
        Store(
            "H",
            (const(start),),
            Cast(
                f"float16x{LANES}",
                Binary("*", Load("X", (const(start),), F32xN), Const(3.0, "float32"), F32xN),
            ),
        )
        for start in range(0, 16, LANES)
    ]
    fn = Function(
        "thrice", (Buffer("X", "float32", (16,)),), (Buffer("H", "float16", (16,)),), (), seq(body)
    )
    kernel = kernel_of(fn)
    assert "roundf16" not in kernel.source
    X = np.random.default_rng(3).standard_normal(16).astype(np.float32) * 1000
    H = np.zeros(16, np.float16)
    assert call(kernel, {"X": X, "H": H}, {}) == 0
    assert H.tobytes() == (X * np.float32(3)).astype(np.float16).tobytes()


def test_signature_names_cannot_clash_with_c() -> None:
    """Tensors and symbols named like C keywords or helpers are mangled."""
    i = var("i")
    value = Call("exp", (Load("int", (i,), "float32"),), "float32")
    fn = Function(
        "names",
        (Buffer("int", "float32", ("for",)),),
        (Buffer("exp_f32", "float32", ("for",)),),
        ("for",),
        For("i", var("for"), Store("exp_f32", (i,), value)),
    )
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    y = np.zeros(5, np.float32)
    assert call(kernel_of(fn), {"int": x, "exp_f32": y}, {"for": 5}) == 0
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)


def test_a_small_integer_power_is_multiplies() -> None:
    """`pow(x, 3.0)` (a tanh-GELU's cube) is `x * x * x`, which vectorizes; another exponent
    stays a call of pow."""
    i = var("i")
    x = Load("X", (i,), "float32")
    cube = Call("pow", (x, Const(3.0, "float32")), "float32")
    root = Call("pow", (x, Const(0.5, "float32")), "float32")
    fn = Function(
        "powers",
        (Buffer("X", "float32", (8,)),),
        (Buffer("C", "float32", (8,)), Buffer("R", "float32", (8,))),
        (),
        For(
            "i",
            const(8),
            seq(Store("C", (i,), cube), Store("R", (i,), root)),
            "vectorize",
            factor=8,
        ),
    )
    kernel = kernel_of(fn)
    assert "(X_[i] * X_[i] * X_[i])" in kernel.source and "powf(" in kernel.source
    x_values = np.linspace(0.1, 2, 8, dtype=np.float32)
    outputs = {"X": x_values, "C": np.zeros(8, np.float32), "R": np.zeros(8, np.float32)}
    assert call(kernel, outputs, {}) == 0
    np.testing.assert_allclose(outputs["C"], x_values**3, rtol=1e-6)
    np.testing.assert_allclose(outputs["R"], np.sqrt(x_values), rtol=1e-6)


def test_constants_and_int64_extremes() -> None:
    consts = [
        Const(float("inf"), "float32"),
        Const(float("-inf"), "float64"),
        Const(-(2**63), "int64"),
        Const(4000000000, "uint32"),
        Const(-2.5, "float32"),
        Const(True, "bool"),
    ]
    out = [Buffer(f"o{n}", c.dtype, (1,)) for n, c in enumerate(consts)]
    body = seq(Store(b.name, (const(0),), c) for b, c in zip(out, consts, strict=True))
    fn = Function("consts", (), tuple(out), (), body)
    arrays = {b.name: np.zeros(1, np.dtype(b.dtype)) for b in out}
    assert call(kernel_of(fn), arrays, {}) == 0
    got = [arrays[b.name][0] for b in out]
    assert got == [np.inf, -np.inf, -(2**63), 4000000000, -2.5, True]


def test_pragmas_and_signature() -> None:
    i, j = var("i"), var("j")
    load = Load("X", (i, j), "float32")
    inner = For("j", const(64), Store("Y", (i, j), load), "vectorize", factor=8)
    collapsed = For(
        "i", var("M"), For("j", const(64), Store("Y", (i, j), load), "parallel"), "parallel"
    )
    fn = Function(
        "shape",
        (Buffer("X", "float32", ("M", 64)),),
        (Buffer("Y", "float32", ("M", 64)),),
        ("M",),
        seq(
            collapsed,
            For("i", var("M"), inner),
            For("i", const(4), Store("Y", (i, const(0)), load), "unroll", factor=2),
            For("i", add(var("M"), const(-1)), Store("Y", (i, const(1)), load), start=const(1)),
        ),
    )
    source = render(fn)
    assert "int shape(const float* restrict X_, float* restrict Y_, int64_t M_) {" in source
    assert "#pragma omp parallel for collapse(2) schedule(static)" in source
    assert "#pragma omp simd simdlen(8)" in source
    assert "#pragma GCC unroll 2" in source
    assert "for (int64_t i = 1; i < (1 + (M_ + (-1))); i++) {" in source
    assert "no-tree-loop-vectorize" not in source
    scalar = Function("s", fn.inputs, fn.outputs, fn.symbols, For("i", var("M"), inner.body))
    assert "no-tree-loop-vectorize" in render(scalar)
