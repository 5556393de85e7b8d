"""Necessity flags ("Spurious Tool Use", arXiv 2609.16268).

A tool call is necessary [paper] when a competent model could not answer correctly without it;
calls made for convenience (trivial arithmetic, formatting) are unnecessary. Every code block
gets a verdict before it runs, from one of two judges:

- ``rule`` (our default; no second model call, so the prefix cache is kept): deterministic, and
  it judges need, not syntax. It evaluates the block's arithmetic exactly (fractions) without
  running it: a block is *needed* when it does arithmetic a competent model cannot do reliably in
  its head -- a long multiplication or division (significant digits of the operands multiply to
  more than ``max_digit_products``), a power, root or factorial with a long exact result (more
  than ``max_result_digits`` significant digits), a sum of more than ``max_terms`` terms or with a
  number longer than ``max_digits``, more than ``max_operations`` operations, or an irrational
  constant (math.pi). A block of small arithmetic on literals (with print, round, int, float, abs,
  min, max, sum, math.floor/ceil/sqrt/factorial, f-strings, names bound in the block, ``import
  math``) is *unnecessary*. What the rule cannot evaluate without running it (loops, definitions,
  other calls, names from earlier cells, a block that does not parse) counts as necessary.
  P(unnecessary) is 1.0 or 0.0. The rule set: docs/guards.md#necessity-flags.
- ``model``: the loaded model is asked, in a fresh chat, a one-word NECESSARY/UNNECESSARY
  question with the problem, the tool type and the code (what the paper's judge gets).
  Only the sampled first token's log-probability is available, so the probability is a binary
  approximation: reply starting with "UN" -> P(unnecessary) = exp(lp), reply starting with
  "NE" -> P(unnecessary) = 1 - exp(lp) (all other mass is credited to the other verdict); no
  logprob -> 1.0/0.0 from the text. A missing or failing judge, or an unreadable reply, falls
  back to the rule judge and says so in ``data``.

Modes: ``flag`` (annotate only, the default) or ``enforce`` (skip the call when unnecessary with
P >= ``threshold``; the model is told, as the output block, to continue by direct reasoning).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal, TypedDict

from guards.base import GuardBase, setting, verdict_data
from tuiagent.protocol import FLAG, SKIP, Display, RunRecord, RunView, Span, Verdict, VerdictRecord

SKIP_TEXT = ("This code was not run: the step is simple enough to do without the tool. Continue by "
             "reasoning directly, step by step, and give the final answer in \\boxed{}.")

QUESTION = """You are checking whether a math assistant needs a tool for one step.

Problem:
{problem}

Tool: a Python interpreter.
Tool input:
```python
{code}
```

A tool call is NECESSARY when a competent solver could not reliably get this result without running it. It is UNNECESSARY when the step is easy to do by hand (simple arithmetic, formatting, printing known values).
Answer with one word, NECESSARY or UNNECESSARY."""


class NecessityData(TypedDict, total=False):
    """The data of Necessity's verdicts (one per code block)."""

    necessary: bool
    p_unnecessary: float
    judge: Literal["rule", "model"]  # who decided ("rule" also when the model judge fell back to it)
    reason: str
    reply: str  # the model judge: its reply and the first token's log-probability
    logprob: float | None
    fallback: str  # why the rule judge answered for the model judge
    mode: Literal["flag", "enforce"]
    threshold: float
    skipped: bool


class _Needed(Exception):
    """The block does arithmetic a competent model cannot do reliably in its head."""


class _Unjudged(Exception):
    """The block does more than arithmetic on literal values: the rule cannot tell without running it."""


_MODULE = object()  # a module the kernel has imported already
_IRRATIONAL = frozenset({"math.pi", "math.e", "math.tau", "np.pi", "np.e", "numpy.pi", "numpy.e", "sympy.pi"})
_KNOWN_MODULES = frozenset({"math", "fractions", "numpy", "np", "sympy"})


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
    first operation a competent model could not do reliably in its head, or _Unjudged at anything
    that is not arithmetic on literal values."""

    def __init__(self, limits: Necessity.Settings):
        self.limits = limits
        self.bound: dict[str, Any] = {}
        self.operations = 0

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
            self.bound[node.target.id] = self.binop(node.op, ast.BinOp(node.target, node.op, node.value,
                                                                     lineno=node.lineno))
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
            for child in ([node.left, *node.comparators] if isinstance(node, ast.Compare) else node.values):
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
        if isinstance(node, ast.Attribute) and ast.unparse(node) in _IRRATIONAL:
            raise _Needed(f"{ast.unparse(node)} has endless decimals")
        raise _Unjudged(f"line {node.lineno}: uses {ast.unparse(node) if isinstance(node, ast.Attribute) else type(node).__name__}")

    # -- arithmetic -------------------------------------------------------------------------------

    def step(self, n: int = 1) -> None:
        """Count arithmetic operations: a long chain of small steps is needed too."""
        self.operations += n
        if self.operations > self.limits.max_operations:
            raise _Needed(f"more than {self.limits.max_operations} arithmetic operations")

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
            if digits(a) * digits(b) > lim.max_digit_products:
                raise _Needed(f"{where} is a long multiplication ({digits(a):g} x {digits(b):g} digits)")
            return a * b
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if b == 0:
                raise _Unjudged(f"line {node.lineno}: divides by zero")
            q = a / b if isinstance(op, ast.Div) else Fraction(a // b)
            if digits(b) * digits(q) > lim.max_digit_products:
                raise _Needed(f"{where} is a long division ({digits(b):g}-digit divisor, {digits(q):g}-digit quotient)")
            return q if not isinstance(op, ast.Mod) else a % b
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
        if len(values) > lim.max_terms:
            raise _Needed(f"a sum of {len(values)} terms (> {lim.max_terms})")
        long = [v for v in values if digits(v) > lim.max_digits]
        if long:
            raise _Needed(f"adds {_show(long[0])} ({digits(long[0]):g} digits > {lim.max_digits})")
        self.step(len(values) - 1)
        return sum(values, Fraction(0))

    def power(self, base: Fraction, exponent: Fraction, where: str) -> Fraction:
        if exponent.denominator != 1 or abs(exponent) > 64 or digits(base) > 20:
            raise _Needed(f"{where}: a large or fractional power")
        result = base ** int(exponent)
        if exponent not in (0, 1) and digits(result) > self.limits.max_result_digits:
            raise _Needed(f"{where} = {_show(result)} is a large power ({digits(result):g} digits)")
        return Fraction(result)

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
            if root is None or digits(root) > self.limits.max_result_digits:
                raise _Needed(f"{name}({_show(one)}) is not a small exact root")
            return root
        if name == "math.factorial" and one is not None and one.denominator == 1 and 0 <= one <= 20:
            result = Fraction(math.factorial(int(one)))
            if digits(result) > self.limits.max_result_digits:
                raise _Needed(f"{name}({_show(one)}) = {_show(result)} is a large product")
            return result
        raise _Unjudged(f"line {node.lineno}: calls {name}")


_OPS = {ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
# Calls a person does without effort on one number (rounding, sign, type).
_ROUNDING: dict[str, Callable[[Fraction], Fraction]] = {
    "float": lambda x: x, "abs": abs, "int": lambda x: Fraction(int(x)), "math.trunc": lambda x: Fraction(int(x)),
    "math.floor": lambda x: Fraction(math.floor(x)), "math.ceil": lambda x: Fraction(math.ceil(x)),
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


def rule_judge(code: str, limits: Necessity.Settings | None = None) -> tuple[bool, float, str]:
    """(necessary, P(unnecessary), reason) from the deterministic rule: is there arithmetic in the
    block that a competent model cannot do reliably in its head (docs/guards.md#necessity-flags)?
    ``limits``: the guard's settings (its defaults when None)."""
    try:
        _Judge(limits or Necessity.Settings()).block(code)
    except _Needed as e:
        return True, 0.0, f"needed: {e}"
    except _Unjudged as e:
        return True, 0.0, f"not judged (counted as necessary): {e}"
    return False, 1.0, "trivial: small arithmetic a competent model does in its head"


def read_reply(text: str, logprob: float | None) -> float | None:
    """P(unnecessary) from the judge's reply and first-token log-probability; None when unreadable."""
    word = text.strip().lstrip("*\"'`").upper()
    if word.startswith("UN"):
        return 1.0 if logprob is None else min(1.0, math.exp(logprob))
    if word.startswith("NE"):
        return 0.0 if logprob is None else max(0.0, 1.0 - math.exp(logprob))
    return None


class Necessity(GuardBase):
    """Necessity: flag (or skip) code blocks a competent solver would not need (arXiv 2609.16268)."""

    name: ClassVar[str] = "necessity"
    order: ClassVar[int] = 20
    main_settings = ("mode", "judge", "threshold")
    summary = (("unnecessary_calls", "unnec calls"), ("necessity_flags", "nec flags"))

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        d = verdict_data(v, NecessityData)
        necessary: bool = d.get("necessary", True)
        p: float = d.get("p_unnecessary", 0)
        skipped: bool | None = d.get("skipped")
        label = "necessary" if necessary else "unnecessary"
        return f"{label} p={p:.2f}" + (" skipped" if skipped else "")

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """A flag on the code block's status line."""
        if v.hook != "on_code":
            return super().display(v)
        d = verdict_data(v, NecessityData)
        necessary = bool(d.get("necessary", True))
        p: float | None = d.get("p_unnecessary")
        judge: str = d.get("judge", "?")
        return Display("code-status", lines=((
            Span("  · ", "muted"), Span("necessary", "muted") if necessary else Span("⚑ unnecessary", "bold warn"),
            Span(f"{'' if p is None else f' P(unnecessary) {p:.2f}'} ({judge})", "muted"),
        ),))

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, int]:
        """Flags and skips of this guard, and (for every run, on or off) the executed blocks its
        deterministic rule judge calls unnecessary, so settings compare."""
        said = [verdict_data(v, NecessityData) for v in run.of(cls.name)]
        necessary: list[bool | None] = [d.get("necessary") for d in said]
        skipped: list[bool | None] = [d.get("skipped") for d in said]
        return {
            "unnecessary_calls": sum(not rule_judge(p.text)[0] for p in run.pieces if p.kind == "code" and p.executed),
            "necessity_flags": sum(n is False for n in necessary),
            "necessity_skipped": sum(bool(s) for s in skipped),
        }

    @dataclass(frozen=True)
    class Settings:
        judge: Literal["rule", "model"] = setting(
            "rule", "who decides: 'rule' (fast, deterministic) or 'model' (asks the loaded model; a second "
                    "model call costs the prefix cache); our default: rule", tag="default")
        mode: Literal["flag", "enforce"] = setting(
            "flag", "'flag' annotates only; 'enforce' does not run an unnecessary call and tells the model "
                    "to reason directly; default flag, as docs/guards.md specifies", tag="default")
        threshold: float = setting(
            0.5, "enforce skips a call when P(unnecessary) >= threshold", check=lambda v: 0.0 <= v <= 1.0,
            allowed="a probability in [0, 1]", tag="default")
        max_operations: int = setting(
            10, "rule judge: a block of more arithmetic operations is a long chain of steps: needed",
            check=lambda v: v >= 1, allowed="an integer >= 1", tag="default")
        max_terms: int = setting(
            5, "rule judge: a sum of more terms is needed", check=lambda v: v >= 2, allowed="an integer >= 2",
            tag="default")
        max_digits: int = setting(
            6, "rule judge: a sum or difference with a number of more significant digits is needed",
            check=lambda v: v >= 1, allowed="an integer >= 1", tag="default")
        max_digit_products: int = setting(
            6, "rule judge: a multiplication or division whose operands' significant digits multiply to "
               "more than this (3 x 3 = 9) is long, so needed", check=lambda v: v >= 1,
            allowed="an integer >= 1", tag="default")
        max_result_digits: int = setting(
            4, "rule judge: a power, root or factorial whose exact result has more significant digits "
               "is needed", check=lambda v: v >= 1, allowed="an integer >= 1", tag="default")

    def __init__(self, settings: "Necessity.Settings"):
        self.settings = settings

    async def on_code(self, code: str, view: RunView) -> Verdict:
        s = self.settings
        data: NecessityData
        if s.judge == "model":
            data = await self._ask_model(code, view)
        else:
            necessary, p, reason = rule_judge(code, s)
            data = {"necessary": necessary, "p_unnecessary": p, "judge": "rule", "reason": reason}
        data.update({"mode": s.mode, "threshold": s.threshold})
        p = data["p_unnecessary"]
        label = "unnecessary" if not data["necessary"] else "necessary"
        reason = f"{label} (P(unnecessary) = {p:.3f}, {data['judge']} judge)"
        if s.mode == "enforce" and not data["necessary"] and p >= s.threshold:
            data["skipped"] = True
            return Verdict(SKIP, reason=reason + ": not executed", text=SKIP_TEXT, data=data)
        data["skipped"] = False
        return Verdict(FLAG, reason=reason, data=data)

    async def _ask_model(self, code: str, view: RunView) -> NecessityData:
        """The model judge's verdict data, or the rule judge's with ``fallback`` saying why."""
        s = self.settings
        why = ""
        if view.judge is None:
            why = "no model judge available"
        else:
            try:
                reply = await view.judge(QUESTION.format(problem=view.problem.strip(), code=code.strip()),
                                         max_tokens=3)
            except Exception as e:  # the rule judge answers instead, visibly
                why = f"model judge failed ({type(e).__name__}: {e})"
            else:
                p = read_reply(reply.text, reply.logprob)
                if p is not None:
                    necessary = not reply.text.strip().lstrip("*\"'`").upper().startswith("UN")
                    return {"necessary": necessary, "p_unnecessary": p, "judge": "model",
                            "reason": f"model replied {reply.text.strip()!r}", "reply": reply.text,
                            "logprob": reply.logprob}
                why = f"unreadable model reply {reply.text!r}"
        necessary, p, reason = rule_judge(code, s)
        return {"necessary": necessary, "p_unnecessary": p, "judge": "rule", "reason": reason, "fallback": why}
