"""A calculator as the tool: one arithmetic expression in, its value out, and nothing else runs.

The tool-use-tax paper's GSM8K agent is "equipped only with a calculator" (arXiv 2605.00136,
section 3.1); this kernel is that tool for the run key ``tool = "calculator"`` (core.prompts tells
the model so). What it accepts is ours, since the paper names no grammar: numbers, + - * / // %
**, unary signs and parentheses; anything else (a name, a call, a second line) is an error the
model reads, as a real calculator would refuse it. Powers are bounded so no expression runs long.
"""

from __future__ import annotations

import ast
import operator
import time
from collections.abc import Callable

from kernels.base import CellResult, Output
from kernels.noop import NoopKernel

GRAMMAR = "one arithmetic expression: numbers, + - * / // % **, and parentheses"
MAX_EXPONENT = 1000  # [ours] bigger powers are refused, so no expression can run long
_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class NotArithmetic(ValueError):
    """The text is not one arithmetic expression the calculator takes."""


def evaluate(text: str) -> int | float:
    """The value of ``text``, one arithmetic expression; NotArithmetic, ZeroDivisionError or
    OverflowError otherwise."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise NotArithmetic(f"the calculator takes {GRAMMAR}") from None
    return _value(tree.body)


def _value(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise OverflowError(f"exponents above {MAX_EXPONENT} are not computed")
        return _BINARY[type(node.op)](left, right)
    raise NotArithmetic(f"the calculator takes {GRAMMAR}, not {ast.unparse(node)!r}")


class CalculatorKernel(NoopKernel):
    """A kernel that evaluates one arithmetic expression per call and keeps no state (the rest of a
    kernel's life, starting and stopping, is the no-op kernel's: nothing runs between calls)."""

    async def execute(self, code: str, timeout: float | None = None) -> CellResult:
        started = time.perf_counter()
        self.calls.append(code)
        try:
            text, error = f"{evaluate(code)}\n", None
        except (NotArithmetic, ZeroDivisionError, OverflowError) as e:
            text, error = f"{type(e).__name__}: {e}\n", type(e).__name__
        duration = time.perf_counter() - started
        output = Output("result", text) if error is None else Output("error", text)
        return CellResult(outputs=(output,), error=error is not None, error_name=error, duration_s=duration)
