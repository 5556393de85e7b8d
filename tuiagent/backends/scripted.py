"""A test double that replays written turns: deterministic runs through the real loop and kernel.

Script file: JSON lines, one model turn (one generation call) a line::

    {"text": "Compute it.\\n```python\\nprint(6*7)\\n```\\n", "logprob": -0.01}
    {"tokens": [["The answer is ", -0.2], ["\\\\boxed{42}", -0.05]]}

``text`` is split into word-sized tokens that all get ``logprob`` (omitted: no logprobs);
``tokens`` gives the pieces and their log-probabilities exactly. Stop strings apply as
with a real model. When the script runs out, the backend ends every further turn at once.

Option (``spec.options`` in models.toml, overridable by ``create(spec, **options)``): ``delay_s``,
seconds to wait before each token (default 0), to replay at a model's pace, e.g. to stop a run
part-way in a test.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuiagent import safe_read
from tuiagent.backends.base import GenerationStats
from tuiagent.backends.stops import StopMatcher
from tuiagent.backends.templates import render_named
from tuiagent.config.spec import ModelSpec
from tuiagent.errors import ConfigError
from tuiagent.protocol import Determinism, Sampling, StopReason, Token, TokenStream

_PIECES = re.compile(r"\s*\S+|\s+")


def split_tokens(text: str, logprob: float | None) -> list[Token]:
    return [Token(p, logprob) for p in _PIECES.findall(text)]


def load_script(path: Path) -> list[list[Token]]:
    """Parse a script file into turns of tokens; mistakes name the file and line."""
    text = safe_read.read_text(
        path, limit=safe_read.SCRIPT_BYTES, what="script", fix="pass a regular file with --script"
    )
    lines = text.split("\n")  # not splitlines(): U+2028 and the like may sit inside a turn's JSON string
    turns = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = safe_read.json_loads(line)
            if "tokens" in entry:
                turns.append([Token(str(t), None if lp is None else float(lp)) for t, lp in entry["tokens"]])
            else:
                turns.append(split_tokens(str(entry["text"]), entry.get("logprob")))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                f"line {n} is not a turn ({type(e).__name__}: {e})",
                file=str(path),
                fix='write one JSON object a line: {"text": "...", "logprob": -0.1} or {"tokens": [["piece", -0.1], ...]}',
            ) from None
    return turns


class ScriptedBackend:
    """Replays turns in order; ``delay_s`` per token simulates a model's speed."""

    determinism: Determinism = "bit-exact"

    def __init__(
        self, turns: list[list[Token]], *, model_id: str = "scripted", template: str = "chatml", delay_s: float = 0.0
    ):
        self.model_id = model_id
        self.turns = turns
        self.template = template
        self.delay_s = delay_s
        self.stats = GenerationStats()
        self.prompts: list[str] = []  # every prompt it was given, for tests and replay checks
        self.schemas: list[Mapping[str, Any]] = []  # every JSON schema ``stream_json`` was given
        self._next = 0

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream:
        return TokenStream(self.generate, prompt, sampling, stop)

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream:
        """The next turn, as ``stream`` gives it: the script, not the schema, says what it is."""
        self.schemas.append(schema)
        return TokenStream(self.generate, prompt, sampling, [])

    async def generate(
        self, out: TokenStream, prompt: str, sampling: Sampling, stop: Sequence[str]
    ) -> AsyncGenerator[Token, None]:
        """The tokens behind ``stream``; sets ``out.stop_reason`` as it ends. Test doubles override
        it to pace, record or break a stream (``async for t in super().generate(...)``)."""
        self.stats.calls += 1
        self.prompts.append(prompt)
        n_prompt = self.count_tokens(prompt)
        self.stats.prompt_tokens_total += n_prompt
        self.stats.prompt_tokens_evaluated += n_prompt
        turn = self.turns[self._next] if self._next < len(self.turns) else []
        self._next += 1
        matcher = StopMatcher(stop)
        reason: StopReason = "eos"
        for i, token in enumerate(turn):
            if i >= sampling.max_tokens:
                reason = "length"
                break
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            else:
                await asyncio.sleep(0)
            self.stats.generated_tokens += 1
            for piece in matcher.feed(token):
                yield piece
            if matcher.stopped:
                out.stop_reason = "stop"
                return
        for piece in matcher.flush():
            yield piece
        out.stop_reason = reason

    def count_tokens(self, text: str) -> int:
        return len(_PIECES.findall(text))

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        return render_named(self.template, messages)

    async def aclose(self) -> None:
        return None


def create(spec: ModelSpec, *, script: str | Path | None = None, **options: object) -> ScriptedBackend:
    delay_s = {**spec.options, **options}.get("delay_s", 0.0)
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float) or delay_s < 0:
        raise ConfigError(
            f"options.delay_s is {delay_s!r}",
            file=spec.origin,
            key=f"models.{spec.id}.options.delay_s",
            fix="give seconds per token >= 0",
        )
    path = script or spec.source.path
    if not path:
        raise ConfigError(
            "the scripted backend needs a script file",
            key=f"models.{spec.id}.source.path",
            fix="pass --script FILE (JSON lines, one turn a line)",
        )
    template = spec.chat_template if spec.chat_template in ("chatml", "raw") else "chatml"
    return ScriptedBackend(load_script(Path(path)), model_id=spec.id, template=template, delay_s=float(delay_s))
