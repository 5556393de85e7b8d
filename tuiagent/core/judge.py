"""Ask the loaded model a short question outside the run (the necessity guard's model judge)."""

from __future__ import annotations

from tuiagent.backends.base import Backend
from tuiagent.protocol import Sampling, TokenLP


async def ask(backend: Backend, question: str, max_tokens: int = 3) -> TokenLP:
    """The model's greedy reply to ``question`` in a fresh chat and its first token's
    log-probability. Costs the prefix cache: the next call re-evaluates its prompt."""
    prompt = backend.render_chat([{"role": "user", "content": question}])
    async with backend.stream(prompt, Sampling(temperature=0.0, max_tokens=max_tokens), []) as stream:
        tokens = [t async for t in stream]
    return TokenLP("".join(t.text for t in tokens), tokens[0].logprob if tokens else None)
