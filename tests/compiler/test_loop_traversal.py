"""The loop IR's walks follow the dataclass fields: a statement they have never heard of, with
an operand record, is walked, rewritten and dumped without an edit to them; a renderer without
a rule for it says so."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tunehub.compiler.ir import Expr, Load, substitute
from tunehub.compiler.loop import (
    BUFFER,
    Buffer,
    Function,
    Stmt,
    Store,
    buffers_used,
    child_stmts,
    const,
    exprs,
    format_stmt,
    map_exprs,
    stmts,
    var,
)
from tunehub.compiler.render.cstyle import CStyleRenderer


@dataclass(frozen=True, slots=True)
class Tile:
    """An operand record: a buffer and an offset in it."""

    buffer: str = field(metadata=BUFFER)
    offset: Expr


@dataclass(frozen=True, slots=True)
class Twice(Stmt):
    """A made-up statement: copies `src` to `dst`, then runs `body` and `rest`."""

    dst: str = field(metadata=BUFFER)
    src: Tile
    count: Expr
    body: Stmt
    rest: tuple[Stmt, ...] = ()
    label: str = "twice"


def _tree() -> Twice:
    i = var("i")
    inner = Store("y", (i,), Load("x", (i,), "float32"))
    last = Store("z", (const(0),), Load("w", (i,), "float32"))
    return Twice("d", Tile("s", i), var("n"), inner, (last,))


def test_children_and_expressions_come_from_the_fields() -> None:
    tree = _tree()
    assert child_stmts(tree) == (tree.body, *tree.rest)
    assert list(stmts(tree)) == [tree, tree.body, *tree.rest]
    assert exprs(tree) == (var("i"), var("n"))  # the record's offset, then `count`
    assert buffers_used(tree) == {"d", "s", "x", "y", "w", "z"}


def test_map_exprs_rewrites_records_and_nested_statements() -> None:
    tree = _tree()
    j = var("j")
    mapped = map_exprs(tree, lambda e: substitute(e, {"i": j}))
    assert isinstance(mapped, Twice)
    assert mapped.src == Tile("s", j) and mapped.count == var("n")
    assert mapped.body == Store("y", (j,), Load("x", (j,), "float32"))
    assert mapped.rest == (Store("z", (const(0),), Load("w", (j,), "float32")),)
    assert map_exprs(tree, lambda e: e) is tree


def test_a_statement_without_a_printer_dumps_its_fields() -> None:
    line = format_stmt(Twice("d", Tile("s", const(0)), const(1), Store("y", (), const(0))), 1)
    assert line.startswith("  Twice(dst='d', src=Tile(buffer='s'")


def test_a_renderer_without_a_rule_refuses_the_statement() -> None:
    fn = Function("f", (), (Buffer("y", "float32", (4,)),), (), _tree())
    with pytest.raises(ValueError, match="c has no Twice statements"):
        CStyleRenderer().render(fn)
