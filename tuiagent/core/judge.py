"""Ask a model a short question outside the run (the necessity guard's model judge)."""

from __future__ import annotations

from tuiagent.backends.base import Backend
from tuiagent.protocol import JudgeReply, Sampling, TokenLP


async def ask(backend: Backend, question: str, max_tokens: int = 3) -> JudgeReply:
    """The model's greedy reply to ``question`` in a fresh chat, with every token's log-probability.
    On the run's own backend this costs the prefix cache: the next turn re-evaluates its prompt."""
    prompt = backend.render_chat([{"role": "user", "content": question}])
    async with backend.stream(prompt, Sampling(temperature=0.0, max_tokens=max_tokens), []) as stream:
        tokens = tuple([TokenLP(t.text, t.logprob) async for t in stream])
    return JudgeReply("".join(t.text for t in tokens), tokens, backend.model_id)
