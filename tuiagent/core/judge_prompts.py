"""The judge's prompts, each with its source, a version (part of the cache key) and a strict parser.

A parser takes the judge's reply and returns a value, or ``UNPARSEABLE`` when the reply does not say
what the prompt asks for in the form it asks for; the judge counts those.

A paper's prompts live in its package and register through the ``tuiagent.judge_prompts`` entry
point (``guards.attc.prompts``, ``guards.tim.prompts``, ``guards.necessity.judging``,
``guards.gstep.prompts``); the one here is shared (the gold steps that the tool-use
tax and the TIM protocol both ask), with the readers any prompt may use.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuiagent import plugins
from tuiagent.core.judge_schemas import Schema
from tuiagent.protocol import JudgeReply

UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class JudgePrompt:
    """A question for the judge: ``template`` with ``{inputs}``; ``pair`` names the two inputs a
    pairwise prompt swaps for its second order (None: a single question); ``schema``: the JSON schema of
    the reply the prompt asks for, for a judge that constrains its replies (``core.judge_schemas``; None:
    the reply is not JSON)."""

    id: str
    version: int
    template: str
    source: str
    parse: Callable[[JudgeReply], Any]
    max_tokens: int
    inputs: tuple[str, ...]
    pair: tuple[str, str] | None = None
    schema: Schema | None = None

    def render(self, **inputs: str) -> str:
        missing = set(self.inputs) - set(inputs)
        extra = set(inputs) - set(self.inputs)
        if missing or extra:
            raise ValueError(
                f"judge prompt {self.id!r} takes {', '.join(self.inputs)}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}"
            )
        return self.template.format(**{k: str(v).strip() for k, v in inputs.items()})


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)


def json_object(text: str) -> dict[str, Any] | None:
    """The reply as one JSON object (optionally in a ```json fence, nothing else around it); None otherwise."""
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def parse_yes_no(reply: JudgeReply) -> Any:
    """True for "yes", False for "no" (case and a trailing full stop aside); nothing else parses."""
    word = reply.text.strip().rstrip(".!").strip().lower()
    return {"yes": True, "no": False}.get(word, UNPARSEABLE)


def parse_count(reply: JudgeReply) -> Any:
    """A whole number 1..99 and nothing else (a trailing full stop aside)."""
    text = reply.text.strip().rstrip(".").strip()
    return int(text) if text.isdigit() and 0 < int(text) < 100 else UNPARSEABLE


# [ours] Type A of the tool-use tax (section 2.4) needs the gold computation's steps; where the
# reference has no GSM8K calculator annotations the judge counts them.
GOLD_STEPS_PROMPT = (
    "Here is the worked solution of a math word problem. How many separate arithmetic calculations "
    "does it perform to reach the answer?\n\nSolution:\n{reference}\n\nReply with one number."
)

PROMPTS: dict[str, JudgePrompt] = {
    p.id: p
    for p in (
        JudgePrompt(
            "gold_steps",
            1,
            GOLD_STEPS_PROMPT,
            "[ours] the gold steps of Type A (tool-use tax, section 2.4)",
            parse_count,
            4,
            ("reference",),
        ),
    )
}


PLUGGED = "tuiagent.judge_prompts"  # a plug-in's prompts: an entry point to a sequence of JudgePrompt


def prompt(prompt_id: str) -> JudgePrompt:
    """The registered prompt ``prompt_id`` (shipped here or by a plug-in); an unknown one is a
    ValueError naming the known ones."""
    if prompt_id in PROMPTS:  # a plug-in is imported only for its own prompts
        return PROMPTS[prompt_id]
    known = registered()
    try:
        return known[prompt_id]
    except KeyError:
        raise ValueError(f"unknown judge prompt {prompt_id!r}; known: {', '.join(known)}") from None


def registered() -> dict[str, JudgePrompt]:
    """Every prompt: the shipped ones and the plug-ins'."""
    return PROMPTS | _plugged(tuple(plugins.names(PLUGGED)))


@functools.lru_cache(maxsize=8)
def _plugged(names: tuple[str, ...]) -> dict[str, JudgePrompt]:
    out: dict[str, JudgePrompt] = {}
    for name in names:
        found: Any = plugins.load(PLUGGED, name, "judge prompt set")
        for p in found:
            if p.id in PROMPTS or p.id in out:
                raise ValueError(f"judge prompt {p.id!r} of plug-in {name!r} is registered twice")
            out[p.id] = p
    return out
