"""Loop IR: vector dtypes, folding index arithmetic, names, traversal and dumps."""

from __future__ import annotations

import pytest

from tunehub.compiler.ir import Binary, Call, Cast, Const, Load, Unary, Var, loads
from tunehub.compiler.loop import (
    Assign,
    Buffer,
    Decl,
    For,
    Function,
    If,
    Namer,
    Seq,
    Store,
    Workspace,
    add,
    buffers_used,
    ceildiv,
    const,
    exprs,
    flat_index,
    format_stmt,
    hoist_loads,
    lanes,
    minimum,
    mul,
    scalar,
    seq,
    split_reads,
    stmts,
    sub,
    var,
    vector,
)


def test_vector_dtypes() -> None:
    assert vector("float32", 16) == "float32x16"
    assert vector("float32", 1) == "float32"
    assert (lanes("float32x16"), scalar("float32x16")) == (16, "float32")
    assert (lanes("bfloat16x8"), scalar("bfloat16x8")) == (8, "bfloat16")
    assert (lanes("int8"), scalar("uint8")) == (1, "uint8")


def test_index_arithmetic_folds_constants() -> None:
    i = var("i")
    assert add(const(2), const(3)) == const(5)
    assert add(i, const(0)) == i and mul(const(1), i) == i
    assert mul(i, const(0)) == const(0)
    assert sub(i, i) == const(0)
    assert ceildiv(const(10), 4) == const(3)
    assert ceildiv(i, 1) == i
    assert minimum(const(4), const(7)) == const(4)
    assert isinstance(add(i, const(1)), Binary)


def test_flat_index_is_row_major() -> None:
    i, j = var("i"), var("j")
    offset = flat_index((i, j), (const(4), var("N")))
    assert offset == Binary("+", Binary("*", i, var("N"), "int64"), j, "int64")
    assert flat_index((i,), (const(4), const(5))) == i  # already flat


def test_namer_avoids_reserved_names_keywords_and_underscores() -> None:
    fresh = Namer({"i", "acc"})
    assert fresh("i") == "i1"
    assert fresh("i") == "i2"
    assert fresh("acc") == "acc1"
    assert fresh("for") == "for1"
    assert fresh("k_inner") == "kinner"
    assert fresh("_x_") == "x"
    assert fresh("9") == "v9"


def test_function_rejects_a_name_declared_twice() -> None:
    body = Store("A", (const(0),), Const(1.0, "float32"))
    with pytest.raises(ValueError, match="declared twice"):
        Function("f", (Buffer("A", "float32", (4,)),), (), ("A",), body)
    fn = Function(
        "f", (), (Buffer("A", "float32", (4,)),), (), body, (Workspace("w", "int8", (2,)),)
    )
    assert fn.buffer("w") == Workspace("w", "int8", (2,)) and fn.buffer("x") is None


def test_seq_flattens_and_dump_is_readable() -> None:
    acc = Var("acc", "float32")
    update = Assign("acc", Binary("+", acc, Load("A", (var("i"), var("k")), "float32"), "float32"))
    body = seq(
        Decl("acc", "float32", init=Const(0.0, "float32")),
        [For("k", var("K"), update, "vectorize", factor=16, reduction=(("sum", "acc"),))],
        Store("B", (var("i"),), acc),
    )
    assert isinstance(body, Seq) and len(body.body) == 3
    text = format_stmt(For("i", const(8), body, "parallel"))
    assert text.splitlines() == [
        "for i in range(8):  # parallel",
        "  acc: float32 = 0.0",
        "  for k in range(K):  # vectorize, factor=16, sum:acc",
        "    acc = acc + A[i, k]",
        "  B[i] = acc",
    ]
    assert buffers_used(body) == {"A", "B"}


def test_unknown_loop_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="loop kind"):
        For("i", const(1), Seq(()), "spin")


def test_split_reads_makes_each_read_once_under_any_of_its_uses_conditions() -> None:
    """Two forms of one word are one read (by `same`), made where either use is; a `where`
    is read whole; the rest reads the arrays; a read of a variable bound inside the loop
    cannot be split."""
    n = var("n")
    word = Load("w", (Binary("//", n, const(2), "int64"),), "uint32")
    other = Load("w", (Binary("//", add(n, const(0)), const(2), "int64"),), "uint32")
    inside = Binary("<", n, var("k"), "bool")
    where = Call("where", (inside, Load("x", (n,), "float32"), Const(0.0, "float32")), "float32")
    body = seq(
        If(Binary("<", n, const(3), "bool"), Store("a", (n,), Cast("float32", word))),
        If(Binary(">", n, const(5), "bool"), Store("b", (n,), Cast("float32", other))),
        Store("c", (n,), where),
    )
    loop = For("n", const(8), body, "unroll")
    fold = {other: word}
    split = split_reads(loop, Namer(), lambda e: fold.get(e, e))
    assert split is not None
    assert split.reads == (word, where)
    assert split.guards[0] == Binary(
        "or", Binary("<", n, const(3), "bool"), Binary(">", n, const(5), "bool"), "bool"
    )
    assert split.guards[1] is None
    assert {ld.tensor for s in stmts(split.rest) for e in exprs(s) for ld in loads(e)} == set(
        split.names
    )
    made = split.into(("p", "q"))
    assert [s.buffer for s in stmts(made) if isinstance(s, Store)] == ["p", "q"]
    assert split.decls(("p", "q")) == [Decl("p", "uint32", (8,)), Decl("q", "float32", (8,))]
    inner = For("j", const(2), Store("a", (n,), Load("x", (var("j"),), "float32")))
    assert split_reads(For("n", const(8), inner), Namer()) is None
    # A read in an else branch is made where the condition fails; `only` picks buffers.
    y = Load("y", (n,), "float32")
    branches = If(inside, Store("a", (n,), Load("x", (n,), "float32")), Store("b", (n,), y))
    split = split_reads(For("n", const(8), branches), Namer(), only={"y"})
    assert split is not None and split.reads == (y,)
    assert split.guards == (Unary("not", inside, "bool"),)


def test_hoist_loads_keeps_guarded_written_and_varying_reads() -> None:
    i, k = var("i"), var("k")
    row = Load("m", (i,), "float32")
    guarded = Load("g", (i,), "float32")
    varying = Load("x", (i, k), "float32")
    written = Load("w", (i,), "float32")
    where = Call(
        "where", (Binary(">", row, Const(0.0, "float32"), "bool"), guarded, row), "float32"
    )
    value = Binary("+", Binary("+", varying, where, "float32"), written, "float32")
    loop = For("k", const(8), seq(Store("y", (i, k), value), Store("w", (i,), row)), "vectorize")
    hoisted = hoist_loads(loop, Namer(), {"m", "g", "x", "w"})
    assert isinstance(hoisted, Seq)
    decl, body = hoisted.body
    assert decl == Decl("m", "float32", init=row)
    loads_left = {ld.tensor for s in stmts(body) for e in exprs(s) for ld in loads(e)}
    assert loads_left == {"g", "x", "w"}
    assert hoist_loads(loop, Namer(), {"x"}) is loop
