"""The necessity guard's arithmetic-difficulty heuristic [ours]: a fast stand-in for the paper's judge.

It does not ask the paper's question (could a competent model answer *the question* without the
tool?); it asks a narrower one about the block alone, with the question used only for its numbers:
does the block do arithmetic a competent model cannot do reliably in its head? It evaluates the
block's arithmetic exactly (fractions) without running it. A block is *needed* at the first
operation that is long (docs/papers/necessity.md#necessity-flags lists the rules and their settings), unless
that operation's exact result is a number the question states: then the block only recomputes
what the question gives (a convenience use, "double-checking" in the paper's judge prompt). A
block of small arithmetic on literals is *unnecessary*, and so is a short loop or comprehension over
a literal ``range`` and a ``.format`` or f-string of a number it knows (the paper, section 4.1:
"Tool calls used purely for convenience (e.g., trivial arithmetic, formatting) are unnecessary"):
each iteration's arithmetic is counted as if written out. What cannot be evaluated without
running it (while loops, definitions, other calls, names from earlier cells, a block that does not
parse) counts as necessary.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Protocol


class Limits(Protocol):
    """The heuristic's limits (the necessity guard's settings of the same names)."""

    @property
    def max_operations(self) -> int: ...
    @property
    def max_terms(self) -> int: ...
    @property
    def max_digits(self) -> int: ...
    @property
    def max_digit_products(self) -> int: ...
    @property
    def max_result_digits(self) -> int: ...


class _Needed(Exception):
    """The block does arithmetic a competent model cannot do reliably in its head."""


class _Unjudged(Exception):
    """The block does more than arithmetic on literal values: the rule cannot tell without running it."""


_MODULE = object()  # a module the kernel has imported already
_IRRATIONAL = frozenset({"math.pi", "math.e", "math.tau", "np.pi", "np.e", "numpy.pi", "numpy.e", "sympy.pi"})
_KNOWN_MODULES = frozenset({"math", "fractions", "numpy", "np", "sympy"})
# A number as a question writes it: 1,200 (thousands separators), 3.75, 40; "%" after it also states
# its fraction (25% -> 25 and 1/4) [ours].
_NUMBER = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s*%)?")


def stated_numbers(question: str) -> frozenset[Fraction]:
    """The numbers the question states (see _NUMBER)."""
    out: set[Fraction] = set()
    for whole, decimals, percent in _NUMBER.findall(question):
        value = Fraction(whole.replace(",", "") + decimals)
        out.update((value, value / 100) if percent else (value,))
    return frozenset(out)


def digits(x: Fraction) -> float:
    """Significant digits of ``x`` as a person writes it: its exact decimal (1200 -> 2, 12.5 -> 3,
    0.05 -> 1), or, when the decimal does not end, its fraction (1/3 -> 2, 100/7 -> 4)."""
    if x == 0:
        return 1
    den, e2, e5 = x.denominator, 0, 0
    while den % 2 == 0:
        den, e2 = den // 2, e2 + 1
    while den % 5 == 0:
        den, e5 = den // 5, e5 + 1
    if den != 1:
        return len(str(abs(x.numerator))) + len(str(x.denominator))
    scaled = abs(x.numerator) * 10 ** max(e2, e5) // x.denominator
    return len(str(scaled).rstrip("0"))


def _show(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.10g}"


class _Judge:
    """Evaluates a block's arithmetic exactly (fractions) without running it, raising _Needed at the
    first operation a competent model could not do reliably in its head (and whose result the
    question does not state), or _Unjudged at anything that is not arithmetic on literal values."""

    def __init__(self, limits: Limits, stated: frozenset[Fraction]):
        self.limits = limits
        self.stated = stated
        self.bound: dict[str, Any] = {}
        self.operations = 0
        self.recomputed: list[str] = []  # long operations whose result the question states

    def block(self, code: str) -> None:
        try:
            tree = ast.parse(code)
        except SyntaxError as e:
            raise _Unjudged(f"does not parse ({e.msg})") from None
        for node in tree.body:
            self.statement(node)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Pass):
            return
        if isinstance(node, ast.Expr):
            self.value(node.value)
        elif isinstance(node, ast.Assign):
            value = self.value(node.value)
            for target in node.targets:
                self.bind(target, value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self.bound[node.target.id] = self.binop(
                node.op, ast.BinOp(node.target, node.op, node.value, lineno=node.lineno)
            )
        elif isinstance(node, ast.For) and not node.orelse:
            items = self.iterable(node.iter)
            for item in items:
                self.bind(node.target, item)
                for child in node.body:
                    self.statement(child)
        elif isinstance(node, ast.Import) and all(a.name in _KNOWN_MODULES for a in node.names):
            self.bound.update({a.asname or a.name: _MODULE for a in node.names})  # no work: the kernel has them
        else:
            raise _Unjudged(f"line {node.lineno}: {ast.unparse(node).splitlines()[0][:40]!r} is not arithmetic")

    def bind(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.bound[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, tuple) and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self.bind(t, v)
        else:
            raise _Unjudged(f"line {target.lineno}: assigns to {ast.unparse(target)}")

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or node.value is None or isinstance(node.value, str):
                return node.value
            if isinstance(node.value, (int, float)):
                return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
            raise _Unjudged(f"line {node.lineno}: a {type(node.value).__name__} constant")
        if isinstance(node, ast.Name):
            if node.id in self.bound:
                return self.bound[node.id]
            if node.id in _KNOWN_MODULES:
                return _MODULE
            raise _Unjudged(f"line {node.lineno}: uses {node.id!r} from an earlier cell")
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, node)
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand)
            if isinstance(node.op, ast.Not):
                return not operand
            return -operand if isinstance(node.op, ast.USub) and isinstance(operand, Fraction) else operand
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            for child in [node.left, *node.comparators] if isinstance(node, ast.Compare) else node.values:
                self.value(child)
            return True
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.value(e) for e in node.elts)
        if isinstance(node, ast.JoinedStr):
            for part in node.values:
                if isinstance(part, ast.FormattedValue):
                    self.value(part.value)
            return ""
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp)) and len(node.generators) == 1:
            gen = node.generators[0]
            if gen.ifs or gen.is_async:
                raise _Unjudged(f"line {node.lineno}: a comprehension with a condition")
            values = []
            for item in self.iterable(gen.iter):
                self.bind(gen.target, item)
                values.append(self.value(node.elt))
            return tuple(values)
        if isinstance(node, ast.Attribute) and ast.unparse(node) in _IRRATIONAL:
            raise _Needed(f"{ast.unparse(node)} has endless decimals")
        raise _Unjudged(
            f"line {node.lineno}: uses {ast.unparse(node) if isinstance(node, ast.Attribute) else type(node).__name__}"
        )

    def iterable(self, node: ast.expr) -> tuple[Any, ...]:
        """What a loop or comprehension runs over: a literal tuple or list, or a range of literal
        numbers; a long one is needed (its iterations are the work)."""
        items = self.value(node)
        if not isinstance(items, tuple):
            raise _Unjudged(f"line {node.lineno}: loops over {ast.unparse(node)[:40]!r}")
        if len(items) > self.limits.max_terms:
            raise _Needed(f"a loop of {len(items)} iterations (> {self.limits.max_terms})")
        return items

    # -- arithmetic -------------------------------------------------------------------------------

    def step(self, n: int = 1) -> None:
        """Count arithmetic operations: a long chain of small steps is needed too."""
        self.operations += n
        if self.operations > self.limits.max_operations:
            raise _Needed(f"more than {self.limits.max_operations} arithmetic operations")

    def hard(self, result: Fraction, why: str, where: str) -> Fraction:
        """``result`` of an operation, long when ``why`` says why: then needed, unless the question
        states the result (the block only recomputes a number the question gives)."""
        if why and result in self.stated:
            self.recomputed.append(f"{where} = {_show(result)}")
        elif why:
            raise _Needed(why)
        return result

    def binop(self, op: ast.operator, node: ast.BinOp) -> Any:
        if isinstance(op, (ast.Add, ast.Sub)):
            return self.sum(_terms(node), node.lineno)
        a, b = self.value(node.left), self.value(node.right)
        if not (isinstance(a, Fraction) and isinstance(b, Fraction)):
            if isinstance(a, str) or isinstance(b, str):
                return ""  # string formatting or repetition
            raise _Unjudged(f"line {node.lineno}: {ast.unparse(node)} is not arithmetic on numbers")
        lim, where = self.limits, f"{_show(a)} {_OPS.get(type(op), '?')} {_show(b)}"
        self.step()
        if isinstance(op, ast.Mult):
            long = digits(a) * digits(b) > lim.max_digit_products
            why = f"{where} is a long multiplication ({digits(a):g} x {digits(b):g} digits)" if long else ""
            return self.hard(a * b, why, where)
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if b == 0:
                raise _Unjudged(f"line {node.lineno}: divides by zero")
            q = a / b if isinstance(op, ast.Div) else Fraction(a // b)
            long = digits(b) * digits(q) > lim.max_digit_products
            why = (
                f"{where} is a long division ({digits(b):g}-digit divisor, {digits(q):g}-digit quotient)"
                if long
                else ""
            )
            return self.hard(q if not isinstance(op, ast.Mod) else a % b, why, where)
        if isinstance(op, ast.Pow):
            return self.power(a, b, where)
        raise _Unjudged(f"line {node.lineno}: uses {type(op).__name__}")

    def sum(self, terms: list[ast.expr], line: int) -> Any:
        values = [self.value(t) for t in terms]
        if any(isinstance(v, str) for v in values):
            return ""  # string concatenation
        if not all(isinstance(v, Fraction) for v in values):
            raise _Unjudged(f"line {line}: adds something that is not a number")
        return self.add(values)

    def add(self, values: list[Fraction]) -> Fraction:
        lim = self.limits
        long = [v for v in values if digits(v) > lim.max_digits]
        why = (
            f"a sum of {len(values)} terms (> {lim.max_terms})"
            if len(values) > lim.max_terms
            else f"adds {_show(long[0])} ({digits(long[0]):g} digits > {lim.max_digits})"
            if long
            else ""
        )
        result = self.hard(sum(values, Fraction(0)), why, f"the sum of {len(values)} terms")
        self.step(len(values) - 1)
        return result

    def power(self, base: Fraction, exponent: Fraction, where: str) -> Fraction:
        if exponent.denominator != 1 or abs(exponent) > 64 or digits(base) > 20:
            raise _Needed(f"{where}: a large or fractional power")
        result = Fraction(base ** int(exponent))
        long = exponent not in (0, 1) and digits(result) > self.limits.max_result_digits
        return self.hard(
            result, f"{where} = {_show(result)} is a large power ({digits(result):g} digits)" if long else "", where
        )

    def call(self, node: ast.Call) -> Any:
        name = ast.unparse(node.func)
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise _Unjudged(f"line {node.lineno}: calls {name} with starred arguments")
        args = [self.value(a) for a in node.args]
        for k in node.keywords:
            self.value(k.value)
        nums = [a for a in args if isinstance(a, Fraction)]
        one = nums[0] if len(nums) == 1 == len(args) else None
        if name == "print" or name == "str":
            return None if name == "print" else ""
        if isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            if not isinstance(self.value(node.func.value), str):
                raise _Unjudged(f"line {node.lineno}: calls {name}")
            return ""  # formatting what it knows
        if (
            name == "range"
            and 1 <= len(args) <= 3
            and all(isinstance(a, Fraction) and a.denominator == 1 for a in args)
        ):
            bounds = [int(a) for a in args]
            if len(range(*bounds)) > _RANGE_MAX:
                raise _Needed(f"range({', '.join(map(str, bounds))}) has {len(range(*bounds))} values")
            return tuple(Fraction(i) for i in range(*bounds))
        if name in _ROUNDING and one is not None:
            return _ROUNDING[name](one)
        if name == "round" and args and isinstance(args[0], Fraction):
            places = args[1] if len(args) > 1 else None
            return Fraction(round(args[0], int(places))) if isinstance(places, Fraction) else Fraction(round(args[0]))
        if name in ("min", "max", "sum"):
            items = list(args[0]) if len(args) == 1 and isinstance(args[0], tuple) else args
            if not items or not all(isinstance(v, Fraction) for v in items):
                raise _Unjudged(f"line {node.lineno}: {name} of something that is not literal numbers")
            return self.add(items) if name == "sum" else (min(items) if name == "min" else max(items))
        if name in ("math.sqrt", "math.isqrt", "np.sqrt", "numpy.sqrt", "math.factorial") and one is not None:
            self.step()
        if name in ("math.sqrt", "math.isqrt", "np.sqrt", "numpy.sqrt") and one is not None:
            root = _exact_root(one)
            if root is None:
                raise _Needed(f"{name}({_show(one)}) is not a small exact root")
            long = digits(root) > self.limits.max_result_digits
            return self.hard(
                root, f"{name}({_show(one)}) is not a small exact root" if long else "", f"{name}({_show(one)})"
            )
        if name == "math.factorial" and one is not None and one.denominator == 1 and 0 <= one <= 20:
            result = Fraction(math.factorial(int(one)))
            long = digits(result) > self.limits.max_result_digits
            return self.hard(
                result,
                f"{name}({_show(one)}) = {_show(result)} is a large product" if long else "",
                f"{name}({_show(one)})",
            )
        raise _Unjudged(f"line {node.lineno}: calls {name}")


_OPS = {ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
# [ours] a range longer than this is not written out to be judged: it is work (a loop that long is
# needed by the max_terms rule anyway); the cap keeps the judge itself fast.
_RANGE_MAX = 10_000
# Calls a person does without effort on one number (rounding, sign, type).
_ROUNDING: dict[str, Callable[[Fraction], Fraction]] = {
    "float": lambda x: x,
    "abs": abs,
    "int": lambda x: Fraction(int(x)),
    "math.trunc": lambda x: Fraction(int(x)),
    "math.floor": lambda x: Fraction(math.floor(x)),
    "math.ceil": lambda x: Fraction(math.ceil(x)),
}


def _terms(node: ast.expr) -> list[ast.expr]:
    """The terms of a chain of + and - (a - b is the terms a and -b)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        right = node.right if isinstance(node.op, ast.Add) else ast.UnaryOp(ast.USub(), node.right, lineno=node.lineno)
        return [*_terms(node.left), right]
    return [node]


def _exact_root(x: Fraction) -> Fraction | None:
    if x < 0:
        return None
    n, d = math.isqrt(x.numerator), math.isqrt(x.denominator)
    return Fraction(n, d) if n * n == x.numerator and d * d == x.denominator else None


TRIVIAL = "trivial: small arithmetic a competent model does in its head"


def judge(code: str, limits: Limits, question: str = "") -> tuple[bool, float, str]:
    """(necessary, P(unnecessary), reason) for ``code``: is there arithmetic in it that a competent
    model cannot do reliably in its head, and whose result ``question`` does not state?"""
    j = _Judge(limits, stated_numbers(question))
    try:
        j.block(code)
    except _Needed as e:
        return True, 0.0, f"needed: {e}"
    except _Unjudged as e:
        return True, 0.0, f"not judged (counted as necessary): {e}"
    if j.recomputed:
        return (
            False,
            1.0,
            (
                f"trivial: only recomputes numbers the question states ({', '.join(j.recomputed)}); "
                "the rest is small arithmetic"
            ),
        )
    return False, 1.0, TRIVIAL
