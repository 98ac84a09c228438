"""A program as torch's own ops, where one op (or an obvious short composition) is what its
computes chain together: a user timing torch writes `torch.softmax(x, dim=-1)`, not
`exp(x - max) / sum`, and gets torch's fused kernel. Any other program is
`expression.render`'s translated code.

Recognition is by structure: the output compute is written out as one expression over its
row (last) axis, the row reductions it reads inlined, every input named by its role (`T0`
a full tensor, `V1` a vector along the row, `M` a matrix product) in order of first read,
constants as `%.6g`; the text is matched against each op's written form.
"""

from __future__ import annotations

import re

from tunehub.compiler.ir import Binary, Call, Cast, Compute, Const, Expr, Load, Program, Unary, Var
from tunehub.worker.measure.expression import TORCH, Code, operands, render

_NUMBER = r"(?P<eps>[-+.0-9e]+)"  # a constant, as written (`%.6g`)
_SOFTMAX = "(exp((T0 - max(T0))) / sum(exp((T0 - max(T0)))))"
_MEAN = "(T0 - (sum(T0) / N))"
_NORMED = f"({_MEAN} * rsqrt(((sum(({_MEAN} * {_MEAN})) / N) + EPS)))"
_RMS = "(T0 * rsqrt(((sum((T0 * T0)) / N) + EPS)))"
# written form -> torch code; EPS is a constant, N the row's length
_ROW_OPS: dict[str, str] = {
    _SOFTMAX: "torch.softmax(T0, dim=-1)",
    "((T0 - max(T0)) - log(sum(exp((T0 - max(T0))))))": "torch.log_softmax(T0, dim=-1)",
    f"(({_NORMED} * V1) + V2)": "F.layer_norm(T0, (N,), V1, V2, eps=EPS)",
    _NORMED: "F.layer_norm(T0, (N,), eps=EPS)",
    f"({_RMS} * V1)": "F.rms_norm(T0, (N,), V1, eps=EPS)",
    _RMS: "F.rms_norm(T0, (N,), eps=EPS)",
}
# an activation of Z as written (none, or one) -> torch's
_ACTIVATIONS: dict[str, str] = {
    "Z": "Z",
    "max(Z, 0)": "torch.relu(Z)",
    "max(0, Z)": "torch.relu(Z)",
    "((0.5 * Z) * (1 + erf((Z * 0.707107))))": "F.gelu(Z)",
    "((0.5 * Z) * (1 + tanh((0.797885 * (Z + (((0.044715 * Z) * Z) * Z))))))": (
        "F.gelu(Z, approximate='tanh')"
    ),
    "(Z * sigmoid(Z))": "F.silu(Z)",
    "(Z / (1 + exp((-Z))))": "F.silu(Z)",
    "sigmoid(Z)": "torch.sigmoid(Z)",
    "(1 / (1 + exp((-Z))))": "torch.sigmoid(Z)",
}


def render_torch(program: Program, symbols: dict[str, int]) -> Code:
    """The torch code for `program` at `symbols`: torch's op where one expresses it."""
    line = _as_op(program, symbols)
    if line is None:
        return render(program, symbols, TORCH)
    return Code(TORCH.name, (f"{program.outputs[0]} = {line}",), tuple(program.outputs))


def _as_op(program: Program, symbols: dict[str, int]) -> str | None:
    if len(program.outputs) != 1 or program.computes[-1].name != program.outputs[0]:
        return None
    out = program.computes[-1]
    if out.reduce_op is not None or not out.axes:
        return None
    shape = program.shape_of(out.name, symbols)
    row = shape[-1]
    written = _Written(program, symbols, shape)
    text = written.expr(
        out.body, {a: f"b{n}" for n, a in enumerate(out.axes[:-1])} | {out.axes[-1]: "r"}
    )
    if text is None or written.used != {c.name for c in program.computes[:-1]}:
        return None
    names = written.names
    if written.product is not None:
        a, b = written.product
        return _activation(
            text,
            {
                "M": f"torch.matmul({a}, {b})",
                "(M + V0)": _addmm(names, a, b),
                "(V0 + M)": _addmm(names, a, b),
            },
        )
    for form, op in _ROW_OPS.items():
        pattern = re.escape(form).replace("EPS", _NUMBER).replace("N", "(?P<n>[0-9]+)", 1)
        match = re.fullmatch(pattern.replace("N", "(?P=n)"), text)
        if match is None or match.groupdict().get("n", f"{row:.6g}") != f"{row:.6g}":
            continue
        if not op.startswith("F.rms_norm") or _has_rms_norm():
            code = op.replace("EPS", match.group("eps") if "EPS" in form else "")
            return _named(code.replace("(N,)", f"({row},)"), names)
    return _activation(text, {"T0": names["T0"]}) if "T0" in names else None


def _activation(text: str, values: dict[str, str]) -> str | None:
    """torch's activation of one of `values` (written form -> torch code) where `text` is one."""
    for z, value in values.items():
        for form, op in _ACTIVATIONS.items():
            if text == form.replace("Z", z):
                return op.replace("Z", value)
    return None


def _addmm(names: dict[str, str], a: str, b: str) -> str:
    """`a @ b + bias` as a user writes it: a linear layer where `b` is a weight read
    transposed, `addmm` otherwise."""
    if re.fullmatch(r"\w+\.T", b):
        return f"F.linear({a}, {b[:-2]}, {names['V0']})"
    return f"torch.addmm({names['V0']}, {a}, {b})"


def _named(code: str, names: dict[str, str]) -> str:
    return re.sub(r"\b[TV][0-9]+\b", lambda m: names[m.group(0)], code)


def _has_rms_norm() -> bool:
    import torch.nn.functional as F

    return hasattr(F, "rms_norm")


class _Written:
    """An output compute's expression written over roles (`b0`.. the batch axes, `r` the
    row), inputs named by role, or None where a read is not one of the roles'."""

    def __init__(self, program: Program, symbols: dict[str, int], shape: tuple[int, ...]) -> None:
        self.program, self.symbols, self.shape, self.row = program, symbols, shape, shape[-1]
        self.names: dict[str, str] = {}  # role name -> tensor
        self.used: set[str] = set()  # the computes inlined
        self.product: tuple[str, str] | None = None

    def expr(self, e: Expr, roles: dict[str, str]) -> str | None:
        if isinstance(e, Const):
            return f"{float(e.value):.6g}"
        if isinstance(e, Load):
            return self.load(e, roles)
        if isinstance(e, Var | Cast):
            return None  # an index in arithmetic, a conversion: no op's form
        parts = [
            self.expr(c, roles)
            for c in (
                (e.x,) if isinstance(e, Unary) else (e.a, e.b) if isinstance(e, Binary) else e.args
            )
        ]
        if any(p is None for p in parts):
            return None
        if isinstance(e, Unary):
            return f"(-{parts[0]})" if e.op == "neg" else None
        if isinstance(e, Binary):
            return f"({parts[0]} {e.op} {parts[1]})"
        assert isinstance(e, Call)
        return f"{e.fn}({', '.join(str(p) for p in parts)})"

    def load(self, e: Load, roles: dict[str, str]) -> str | None:
        if not all(isinstance(i, Var) and i.name in roles for i in e.indices):
            return None
        read = tuple(roles[i.name] for i in e.indices if isinstance(i, Var))
        batch = tuple(r for r in roles.values() if r != "r")
        full = (*batch, "r")
        node = self.program.buffer(e.tensor)
        if isinstance(node, Compute):
            return self.inline(node, read, full, batch)
        kinds = {full: ("T", self.shape), ("r",): ("V", (self.row,))}
        kind, shape = kinds.get(read, ("", ()))
        if not kind or self.program.shape_of(e.tensor, self.symbols) != shape:
            return None
        known = next((k for k, t in self.names.items() if t == e.tensor), None)
        if known is not None:
            return known if known.startswith(kind) else None
        name = f"{kind}{len(self.names)}"
        self.names[name] = e.tensor
        return name

    def inline(
        self, c: Compute, read: tuple[str, ...], full: tuple[str, ...], batch: tuple[str, ...]
    ) -> str | None:
        """A compute read whole: a row reduction (`sum(...)`), a matrix product (`M`) or an
        elementwise one, its body written in its own axes' roles."""
        self.used.add(c.name)
        if c.reduce_op is None and read == full:
            return self.expr(c.body, dict(zip(c.axes, read, strict=True)))
        if c.reduce_op == "sum" and read == full and batch == ("b0",) and self.product is None:
            self.product = operands(self.program, c, self.symbols, TORCH)
            return None if self.product is None else "M"
        if c.reduce_op not in ("sum", "max") or read != batch or len(c.reduce_axes) != 1:
            return None
        if self.program.extent(c.reduce_axes[0].extent, self.symbols) != self.row:
            return None
        body = self.expr(
            c.body, dict(zip(c.axes, read, strict=True)) | {c.reduce_axes[0].name: "r"}
        )
        return None if body is None else f"{c.reduce_op}({body})"
