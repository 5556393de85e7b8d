"""Necessity flags ("Spurious Tool Use", arXiv 2609.16268).

A tool call is necessary [paper] when a competent model could not answer correctly without it;
calls made for convenience (trivial arithmetic, formatting) are unnecessary. Every code block
gets a verdict before it runs, from one of two judges:

- ``rule`` (our default; no second model call, so the prefix cache is kept): deterministic.
  The block is unnecessary when it parses and is at most ``max_statements`` statements, each an
  assignment to plain names, a bare expression or ``pass``, built only from number/string
  literals, arithmetic/comparison operators, f-strings, tuples, names bound earlier in the same
  block to such values, and calls to print/round/int/float/abs. Anything else (imports, loops,
  definitions, any other call, names from earlier cells) is necessary. P(unnecessary) is 1.0 or 0.0.
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
from dataclasses import dataclass
from typing import ClassVar, Literal, TypedDict

from guards.base import GuardBase, setting, verdict_data
from tuiagent.protocol import FLAG, SKIP, Display, RunRecord, RunView, Span, Verdict, VerdictRecord

TRIVIAL_CALLS = frozenset({"print", "round", "int", "float", "abs"})

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


class _Trivial(ast.NodeVisitor):
    """Checks one block against the rule; ``why`` says what made it non-trivial."""

    def __init__(self, max_statements: int):
        self.max_statements = max_statements
        self.bound: set[str] = set()
        self.why = ""

    def block(self, code: str) -> bool:
        try:
            tree = ast.parse(code)
        except SyntaxError as e:
            self.why = f"does not parse ({e.msg})"
            return False
        if len(tree.body) > self.max_statements:
            self.why = f"{len(tree.body)} statements (> {self.max_statements})"
            return False
        return all(self.statement(s) for s in tree.body)

    def statement(self, node: ast.stmt) -> bool:
        if isinstance(node, ast.Pass):
            return True
        if isinstance(node, ast.Expr):
            return self.expr(node.value)
        if isinstance(node, ast.Assign):
            names = [n for t in node.targets for n in self._names(t)]
            plain = [n for n in names if n is not None]
            if len(plain) < len(names) or not self.expr(node.value):
                return self._no(node, "assigns to something other than a plain name")
            self.bound.update(plain)
            return True
        if isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name) and node.target.id in self.bound and self.expr(node.value):
                return True
            return self._no(node, "augmented assignment")
        return self._no(node, f"{type(node).__name__.lower()} statement")

    def _names(self, target: ast.expr) -> list[str | None]:
        if isinstance(target, ast.Name):
            return [target.id]
        if isinstance(target, (ast.Tuple, ast.List)):
            return [n for elt in target.elts for n in self._names(elt)]
        return [None]

    def expr(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (int, float, complex, str)) or node.value is None:
                return True
            return self._no(node, "a non-numeric constant")
        if isinstance(node, ast.Name):
            return node.id in self.bound or self._no(node, f"uses {node.id!r}, not a literal value")
        if isinstance(node, ast.BinOp):
            return self.expr(node.left) and self.expr(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.expr(node.operand)
        if isinstance(node, ast.BoolOp):
            return all(self.expr(v) for v in node.values)
        if isinstance(node, ast.Compare):
            return self.expr(node.left) and all(self.expr(c) for c in node.comparators)
        if isinstance(node, ast.Tuple):
            return all(self.expr(e) for e in node.elts)
        if isinstance(node, ast.JoinedStr):
            return all(self.expr(v) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return self.expr(node.value) and (node.format_spec is None or self.expr(node.format_spec))
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in TRIVIAL_CALLS):
                return self._no(node, f"calls {ast.unparse(node.func)}")
            if any(isinstance(a, ast.Starred) for a in node.args):
                return self._no(node, "starred arguments")
            return all(self.expr(a) for a in node.args) and all(self.expr(k.value) for k in node.keywords)
        return self._no(node, f"uses {type(node).__name__}")

    def _no(self, node: ast.AST, why: str) -> bool:
        line = getattr(node, "lineno", None)
        self.why = self.why or (f"line {line}: {why}" if line else why)
        return False


def rule_judge(code: str, max_statements: int = 6) -> tuple[bool, float, str]:
    """(necessary, P(unnecessary), reason) from the deterministic rule."""
    check = _Trivial(max_statements)
    if check.block(code):
        return False, 1.0, "trivial: only literal arithmetic/printing"
    return True, 0.0, f"not trivial: {check.why}"


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
        max_statements: int = setting(
            6, "rule judge: a trivial block has at most this many statements", check=lambda v: v >= 1,
            allowed="an integer >= 1", tag="default")

    def __init__(self, settings: "Necessity.Settings"):
        self.settings = settings

    async def on_code(self, code: str, view: RunView) -> Verdict:
        s = self.settings
        data: NecessityData
        if s.judge == "model":
            data = await self._ask_model(code, view)
        else:
            necessary, p, reason = rule_judge(code, s.max_statements)
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
        necessary, p, reason = rule_judge(code, s.max_statements)
        return {"necessary": necessary, "p_unnecessary": p, "judge": "rule", "reason": reason, "fallback": why}
