"""Helpers shared by the eval tests (imported as tests.eval.helpers): scripted turns and backends."""

from __future__ import annotations

import json
from collections.abc import Callable

from tuiagent.backends.scripted import ScriptedBackend, split_tokens

CODE = "Let me compute.\n```python\nprint({expr})\n```\n```output\n"


def code_turn(expr: str) -> str:
    return CODE.format(expr=expr)


def expr_turn(expr: str) -> str:
    """A code turn with the bare expression, as a calculator takes it."""
    return CODE.replace("print({expr})", "{expr}").format(expr=expr)


def answer_turn(answer: str) -> str:
    return f"So the answer is \\boxed{{{answer}}}."


class Factory:
    """backend_factory(job) for the harness: a fresh ScriptedBackend per run, its turns chosen by
    ``turns_for(job)``; remembers which jobs it was asked for."""

    def __init__(self, turns_for: Callable, *, logprob: float | None = -0.01, delay_s: float = 0.0):
        self.turns_for = turns_for
        self.logprob = logprob
        self.delay_s = delay_s
        self.keys: list[str] = []

    def __call__(self, job):
        self.keys.append(job.key)
        turns = [split_tokens(t, self.logprob) for t in self.turns_for(job)]
        return ScriptedBackend(turns, model_id="scripted", delay_s=self.delay_s)


class CalcKernel:
    """Test double for a kernel: runs ``print(<arithmetic>)`` cells by evaluating the expression (no Jupyter)."""

    def __init__(self, *, fail: bool = False, **_: object):
        self.fail = fail
        self.calls: list[str] = []

    async def start(self) -> None:
        if self.fail:
            raise RuntimeError("kernel would not start")

    async def execute(self, code: str, timeout: float):
        from kernels.base import CellResult, Output

        self.calls.append(code)
        expr = code.strip().removeprefix("print(").removesuffix(")")
        try:
            value = eval(expr, {"__builtins__": {}})  # test double: literal arithmetic only
        except Exception as e:  # noqa: BLE001
            return CellResult(
                outputs=(Output("error", f"{type(e).__name__}: {e}"),), error=True, error_name=type(e).__name__
            )
        return CellResult(outputs=(Output("stdout", f"{value}\n"),))

    async def interrupt(self) -> None: ...

    async def restart(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None: ...


def number_in(question: str) -> int:
    """The i of 'What is i plus i?'."""
    return int(question.split("What is ", 1)[1].split(" ", 1)[0])


def models_file(tmp_path, replies: list[str], logprobs: list[float] | None = None):
    """A models.toml with a scripted judge that gives ``replies`` in order (with ``logprobs``, each
    reply's tokens carry its log-probability; else none)."""
    judge = tmp_path / "judge.jsonl"
    lines = [{"text": r} | ({"logprob": logprobs[i]} if logprobs else {}) for i, r in enumerate(replies)]
    judge.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    path = tmp_path / "models.toml"
    path.write_text(
        f'[models.judge]\nbackend = "scripted"\n[models.judge.source]\nkind = "script"\n'
        f"path = {json.dumps(str(judge))}\n",
        encoding="utf-8",
    )
    return path
