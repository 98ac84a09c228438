"""Walks of the loop IR, read off the statements' dataclass fields (see `nodes.Stmt`).

A field's value is a nested statement, an expression, a tuple of either, an operand record (a
dataclass that is neither, whose expressions and buffers count as the statement's own), or
data the walks pass over. No walk names a statement type, so a new statement, a target's
intrinsic included, needs no edit here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass, replace
from typing import Any, get_args

from tunehub.compiler.ir import Expr, loads
from tunehub.compiler.loop.nodes import Stmt


def child_stmts(stmt: Stmt) -> tuple[Stmt, ...]:
    """The statements directly nested in `stmt`, in order."""
    return tuple(v for v in _values(stmt) if isinstance(v, Stmt))


def stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement of the tree, parents before children."""
    yield stmt
    for child in child_stmts(stmt):
        yield from stmts(child)


def exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions a statement holds itself (not those of nested statements)."""
    return tuple(_exprs(stmt))


def buffers_used(stmt: Stmt) -> set[str]:
    """Names of the buffers and local arrays the tree reads or writes."""
    return {name for s in stmts(stmt) for name in _buffers(s)} | buffers_loaded(stmt)


def buffers_loaded(stmt: Stmt) -> set[str]:
    """Names of the buffers and local arrays the tree reads through loads."""
    return {ld.tensor for s in stmts(stmt) for e in exprs(s) for ld in loads(e)}


def map_exprs(stmt: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    """The tree with `fn` applied to every expression its statements hold (a statement that
    holds none is returned as it is)."""
    return _mapped(stmt, fn)


def map_stmts(stmt: Stmt, fn: Callable[[Stmt], Stmt]) -> Stmt:
    """The tree rebuilt bottom-up: `fn` applied to every statement once its nested ones are
    mapped (the same objects where nothing changed)."""
    changes = {}
    cls: Any = stmt.__class__
    for name, _ in _fields(cls):
        old = getattr(stmt, name)
        if isinstance(old, Stmt):
            new: Any = map_stmts(old, fn)
        elif isinstance(old, tuple) and any(isinstance(item, Stmt) for item in old):
            new = tuple(map_stmts(i, fn) if isinstance(i, Stmt) else i for i in old)
            new = old if all(a is b for a, b in zip(new, old, strict=True)) else new
        else:
            continue
        if new is not old:
            changes[name] = new
    return fn(replace(stmt, **changes) if changes else stmt)


_NODES = (Stmt, *get_args(Expr))  # the dataclasses that are not operand records


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, whether it names a buffer) of each field of a dataclass, () for other classes.
    Cached per class: the walks run over every statement of every candidate lowered."""
    if not is_dataclass(cls):
        return ()
    return tuple((f.name, bool(f.metadata.get("buffer"))) for f in fields(cls))


def _values(node: Any) -> Iterator[Any]:
    """The values of a node's fields, a tuple's items one by one."""
    for name, _ in _fields(node.__class__):
        value = getattr(node, name)
        if isinstance(value, tuple):
            yield from value
        else:
            yield value


def _is_record(value: Any) -> bool:
    return not isinstance(value, _NODES) and bool(_fields(value.__class__))


def _exprs(node: Any) -> Iterator[Expr]:
    for value in _values(node):
        if isinstance(value, Expr):
            yield value
        elif _is_record(value):
            yield from _exprs(value)


def _buffers(node: Any) -> Iterator[str]:
    for name, names_buffer in _fields(node.__class__):
        value = getattr(node, name)
        if names_buffer and value:
            yield value
        elif _is_record(value):
            yield from _buffers(value)


def _mapped(value: Any, fn: Callable[[Expr], Expr]) -> Any:
    """`value` (a field's value, or a statement) with `fn` applied to its expressions and
    those of the statements and records in it; the same object where nothing changed."""
    if isinstance(value, Expr):
        return fn(value)
    if isinstance(value, tuple):
        items = tuple(_mapped(item, fn) for item in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, Stmt) or _is_record(value):
        changes = {}
        for name, _ in _fields(value.__class__):
            old = getattr(value, name)
            new = _mapped(old, fn)
            if new is not old:
                changes[name] = new
        return replace(value, **changes) if changes else value
    return value
