"""OpenAIBackend against a real OpenAI-compatible server on loopback: llama-cpp-python's own
``llama_cpp.server`` serving SmolLM2-135M (n_ctx 2048).

The server is started once for the module (a subprocess on a free loopback port) and stopped at
teardown; every request is bounded (small max_tokens). One thread: llama.cpp's threads spin at
barriers, and on a busy 2-core machine two of them run several times slower than one. The server is started with
``--interrupt_requests False`` (tests/backends/llama_server.py), so a generation that went on after its client left would hold
the model and delay the next request: the cancellation test relies on that.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.backends.llama_server import LOOPBACK, LlamaServer, ServerFailed, free_port
from tuiagent.backends.base import ContextOverflow
from tuiagent.backends.openai import ModelServerError, OpenAIBackend, context_error, create
from tuiagent.backends.templates import render_chatml
from tuiagent.config.spec import ModelSpec, Source
from tuiagent.protocol import Sampling, Token

pytestmark = pytest.mark.slow

N_CTX = 2048
# llama-cpp-python's server applies repeat_penalty 1.1 and min_p 0.05 unless told otherwise.
NEUTRAL = {"repeat_penalty": 1.0, "min_p": 0.0}
GREEDY = Sampling(temperature=0.0, max_tokens=48)
# SmolLM2 answers this greedily with a short code block, then a sentence, then end of turn.
QUESTION = "Print 5 in Python. Reply with only a code block."
STOP = "```\n"
LONG = render_chatml([{"role": "user", "content": "Count from 1 to 300, separated by commas."}])


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory):
    """``python -m llama_cpp.server`` on 127.0.0.1:<free port>; yields (base_url, log path)."""
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    try:
        with LlamaServer(smollm2_path, log, n_ctx=N_CTX) as s:
            yield s.base_url, log
    except ServerFailed as e:
        pytest.fail(str(e))


@pytest.fixture
async def backend(server):
    b = OpenAIBackend(
        model_id="smollm2-server",
        base_url=server[0],
        served_model="smollm2",
        context_size=N_CTX,
        extra_body=NEUTRAL,
        max_retries=0,
        timeout=30,
    )
    yield b
    await b.aclose()


@pytest.fixture(scope="module")
def greedy(server):
    """One greedy streamed completion of the question, shared by the tests that only read it."""

    async def run():
        b = OpenAIBackend(
            model_id="smollm2-server",
            base_url=server[0],
            served_model="smollm2",
            context_size=N_CTX,
            extra_body=NEUTRAL,
            max_retries=0,
            timeout=60,
        )
        _from_a_known_cache(server[0])
        try:
            stream = b.stream(_prompt(), GREEDY, [])
            tokens = [t async for t in stream]
            return tokens, stream.stop_reason, b.stats
        finally:
            await b.aclose()

    return asyncio.run(run())


def _from_a_known_cache(base: str) -> None:
    """Leave the server's KV cache holding an unrelated prompt. llama-cpp-python reuses the cached
    prefix of a prompt and evaluates only the rest, and the split changes the last digits of the
    logits (enough to flip a near-tie token on some CPUs): two requests compare exactly only when
    they start from the same cache."""
    _post(base, {"prompt": "Hi", "max_tokens": 1, "temperature": 0.0})


def _prompt(question: str = QUESTION) -> str:
    return render_chatml([{"role": "user", "content": question}])


async def _run(backend: OpenAIBackend, prompt: str, sampling: Sampling, stop=()) -> tuple[list[Token], str | None]:
    """The tokens of one stream and its stop reason."""
    stream = backend.stream(prompt, sampling, list(stop))
    return [t async for t in stream], stream.stop_reason


async def _collect(backend: OpenAIBackend, prompt: str, sampling: Sampling, stop=()) -> list[Token]:
    return (await _run(backend, prompt, sampling, stop))[0]


def _text(tokens: list[Token]) -> str:
    return "".join(t.text for t in tokens)


def _post(base: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{base}/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with LOOPBACK.open(req, timeout=60) as r:
        return json.loads(r.read())


# ---------------------------------------------------------------- streaming, stops, logprobs


async def test_stream_stops_at_the_stop_string_which_is_never_yielded(backend, greedy):
    full_text = _text(greedy[0])
    assert STOP in full_text, f"SmolLM2 did not close its code block: {full_text!r}"

    tokens, reason = await _run(backend, _prompt(), GREEDY, [STOP, "<never>"])
    text = _text(tokens)
    assert text and text == full_text[: full_text.index(STOP)]
    assert reason == "stop"
    assert text.startswith("```python") and STOP not in text


def test_logprobs_are_sampled_token_logprobs_and_stats_count(greedy):
    tokens, reason, stats = greedy
    assert tokens and reason == "eos"  # the turn ended by itself, within max_tokens
    assert all(isinstance(t.logprob, float) and math.isfinite(t.logprob) and t.logprob <= 0.0 for t in tokens)
    assert stats.calls == 1 and stats.generated_tokens == len(tokens) and stats.prompt_tokens_total > 0


async def test_greedy_stream_matches_the_servers_non_streamed_completion(server, greedy):
    tokens = greedy[0]
    _from_a_known_cache(server[0])
    answer = _post(
        server[0], {"prompt": _prompt(), "max_tokens": GREEDY.max_tokens, "temperature": 0.0, "logprobs": 1, **NEUTRAL}
    )
    choice = answer["choices"][0]
    assert _text(tokens) == choice["text"]
    assert [t.text for t in tokens] == choice["logprobs"]["tokens"]
    assert [t.logprob for t in tokens] == pytest.approx(choice["logprobs"]["token_logprobs"], abs=1e-4)


async def test_logprobs_roughly_agree_with_the_local_llama_cpp_backend(greedy, smollm2_path):
    try:
        from tuiagent.backends.llama_cpp import LlamaCppBackend
    except ImportError:
        pytest.skip("tuiagent.backends.llama_cpp is not there")
    local = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=N_CTX, n_threads=1)
    try:
        mine = await _collect(local, _prompt(), GREEDY)
    finally:
        await local.aclose()
    served = greedy[0]
    assert _text(served) == _text(mine)
    # Same model and weights; different batch shapes can move the last digits.
    diffs = [abs(a.logprob - b.logprob) for a, b in zip(served, mine)]
    print(f"max |server - local| logprob difference: {max(diffs):.2e} over {len(diffs)} tokens")
    assert max(diffs) < 0.02


async def test_length(backend):
    tokens, reason = await _run(backend, _prompt(), Sampling(max_tokens=3), [STOP])
    assert len(tokens) == 3 and reason == "length"


async def test_stops_sent_to_the_server_too(server):
    b = OpenAIBackend(
        model_id="s",
        base_url=server[0],
        served_model="smollm2",
        extra_body=NEUTRAL,
        server_stop="always",
        max_retries=0,
    )
    try:
        tokens, reason = await _run(b, _prompt(), GREEDY, [STOP])
    finally:
        await b.aclose()
    text = _text(tokens)
    assert text.startswith("```python") and STOP not in text
    # llama-cpp-python's server says "stop" for a stop string and for end of sequence alike.
    assert reason == "eos"


async def test_cancellation_closes_the_stream_promptly(backend, server):
    seen: list[Token] = []
    stream = backend.stream(LONG, Sampling(max_tokens=400), [])

    async def consume():
        async for t in stream:
            seen.append(t)

    task = asyncio.create_task(consume())
    while len(seen) < 3:
        await asyncio.sleep(0.01)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0 and stream.stop_reason == "cancelled"

    # Closing the stream early (a consumer that breaks out) closes the HTTP stream as well.
    gen = backend.stream(LONG, Sampling(max_tokens=400), [])
    async for _ in gen:
        break
    await gen.aclose()
    assert gen.stop_reason == "cancelled"

    # The server does not interrupt requests: had it gone on generating 400 tokens for either
    # of the clients that left (~50 ms a token), this would wait for it.
    started = time.monotonic()
    await _collect(backend, _prompt(), Sampling(max_tokens=1))
    assert time.monotonic() - started < 5.0


# ---------------------------------------------------------------- errors


async def test_a_wrong_port_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}/v1"
    b = OpenAIBackend(model_id="x", base_url=url, served_model="m", max_retries=0, timeout=5)
    with pytest.raises(ModelServerError) as err:
        await _collect(b, "hello", Sampling(max_tokens=2))
    await b.aclose()
    message = str(err.value)
    assert url in message and "running" in message and "base_url" in message


async def test_a_server_that_does_not_answer_is_a_clear_timeout_error():
    with socket.socket() as listener:  # accepts connections (backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        b = OpenAIBackend(model_id="x", base_url=url, served_model="m", max_retries=0, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(ModelServerError) as err:
            await _collect(b, "hello", Sampling(max_tokens=2))
        await b.aclose()
    assert time.monotonic() - started < 5
    assert url in str(err.value) and "did not answer within 0.5 s" in str(err.value)


async def test_a_wrong_path_is_a_clear_404_error(server):
    root = server[0].removesuffix("/v1")
    b = OpenAIBackend(model_id="x", base_url=f"{root}/nope", served_model="smollm2", max_retries=0)
    with pytest.raises(ModelServerError) as err:
        await _collect(b, "hello", Sampling(max_tokens=2))
    await b.aclose()
    message = str(err.value)
    assert "404" in message and "served_model" in message and "/v1" in message


async def test_a_prompt_longer_than_the_context_is_context_overflow(backend):
    with pytest.raises(ContextOverflow) as err:
        await _collect(backend, "hello " * (N_CTX + 50), Sampling(max_tokens=4))
    assert err.value.context_size == N_CTX and err.value.prompt_tokens >= N_CTX


# ---------------------------------------------------------------- tokens, templates, create


async def test_token_counts(backend, smollm2_path):
    from llama_cpp import Llama

    text = "def f(x):\n    return x ** 2 + 3 * x  # squares, then more"
    approx = backend.count_tokens(text)
    assert isinstance(approx, int) and approx > 0
    vocab = Llama(model_path=str(smollm2_path), vocab_only=True, verbose=False)
    exact = len(vocab.tokenize(text.encode(), add_bos=False, special=True))
    assert await backend.count_tokens_exact(text) == exact
    assert 0.5 * exact <= approx <= 2 * exact


def test_render_chat_named_templates():
    chatml = OpenAIBackend(model_id="x", base_url="http://127.0.0.1:1/v1", served_model="m")
    raw = OpenAIBackend(model_id="x", base_url="http://127.0.0.1:1/v1", served_model="m", chat_template="raw")
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert chatml.render_chat(messages).endswith("<|im_start|>assistant\n")
    assert raw.render_chat(messages) == "S\n\nU\n\n"


async def test_create_from_a_model_spec(server, monkeypatch):
    from tuiagent.backends import open_backend

    monkeypatch.setenv("TUIAGENT_TEST_SERVER_KEY", "sk-local")
    spec = ModelSpec(
        id="local-server",
        backend="openai",
        origin="test.toml",
        source=Source(
            kind="server", base_url=server[0], served_model="smollm2", api_key_env="TUIAGENT_TEST_SERVER_KEY"
        ),
        context_size=N_CTX,
        options={"timeout": 30, "extra_body": NEUTRAL, "max_retries": 0},
    )
    b = open_backend(spec)
    try:
        assert isinstance(b, OpenAIBackend) and b.model_id == "local-server"
        assert b._client.api_key == "sk-local" and b._client.timeout.read == 30
        tokens = await _collect(b, b.render_chat([{"role": "user", "content": QUESTION}]), Sampling(max_tokens=4))
        assert tokens and all(t.logprob is not None for t in tokens)
    finally:
        await b.aclose()


def test_create_rejects_what_a_server_model_cannot_use():
    from tuiagent.errors import ConfigError

    src = Source(kind="server", base_url="http://127.0.0.1:8000/v1")
    with pytest.raises(ConfigError, match="chat_template"):
        create(ModelSpec(id="m", backend="openai", origin="t.toml", source=src, chat_template="hf"))
    with pytest.raises(ConfigError, match="base_url"):
        create(ModelSpec(id="m", backend="openai", origin="t.toml", source=Source(kind="path", path="/x")))
    with pytest.raises(ConfigError, match="server_stop"):
        create(ModelSpec(id="m", backend="openai", origin="t.toml", source=src, options={"server_stop": "maybe"}))


# ---------------------------------------------------------------- helpers on server shapes


def test_context_error_messages():
    vllm_new = (
        "This model's maximum context length is 2048 tokens. However, your request has 3000 input "
        "tokens. Please reduce the length of the input messages."
    )
    vllm_room = (
        "'max_tokens' is too large: 1024. This model's maximum context length is 2048 tokens and "
        "your request has 1500 input tokens (1024 > 2048 - 1500)."
    )
    vllm_old = (
        "This model's maximum context length is 2048 tokens. However, you requested 3100 tokens "
        "(3000 in the messages, 100 in the completion)."
    )
    llama = "Requested tokens (3000) exceed context window of 2048"
    assert context_error(vllm_new) == (2048, 3000)
    assert context_error(vllm_room) == (2048, 1500)
    assert context_error(vllm_old) == (2048, 3000)
    assert context_error(llama) == (2048, 3000)
    assert context_error("temperature must be >= 0") is None


# ---------------------------------------------------------------- vLLM-shaped streams


class StandInVLLMCompletions:
    """Stand-in for the SDK's ``client.completions`` answering with chunks shaped like
    ``vllm serve``'s (a ``stop_reason`` on every choice; text held back near stop strings while
    the tokens go out). vLLM cannot run here; the llama-cpp-python server above has no
    ``stop_reason``. Records each request's keyword arguments."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.requests: list[dict] = []

    async def create(self, **request):
        from openai.types import Completion

        self.requests.append(request)
        chunks = [
            Completion.construct(**{"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [c]})
            for c in self.chunks
        ]

        class Stream:
            def __init__(self):
                self.items = iter(chunks)
                self.closed = False

            async def __anext__(self):
                try:
                    return next(self.items)
                except StopIteration:
                    raise StopAsyncIteration from None

            async def close(self):
                self.closed = True

        return Stream()


def _vllm_choice(text, tokens, lps, finish=None, stop_reason=None):
    return {
        "index": 0,
        "text": text,
        "finish_reason": finish,
        "stop_reason": stop_reason,
        "logprobs": {"tokens": tokens, "token_logprobs": lps, "text_offset": [0] * len(tokens), "top_logprobs": None},
    }


async def test_vllm_shaped_stream_stop_reason_is_learned_and_used():
    chunks = [
        _vllm_choice("x = 1\n", ["x", " =", " 1", "\n"], [-0.1, -0.2, -0.3, -0.4]),
        _vllm_choice("", ["```"], [-0.5]),  # held back: it might begin the stop string
        _vllm_choice("```\n", ["\n", "```", "output"], [-0.6, -0.7, -0.8], "stop", "```output"),
    ]
    completions = StandInVLLMCompletions(chunks)
    client = type("StandInClient", (), {"completions": completions, "close": lambda self: asyncio.sleep(0)})()
    b = OpenAIBackend(model_id="v", base_url="http://127.0.0.1:1/v1", served_model="m", client=client)
    stop = ["```output"]
    # (With no stops sent the server would not have cut anything; the script is the same to
    # keep it short: the point here is what the backend sends and how it reads the answer.)
    first, reason = await _run(b, "P", GREEDY, stop)
    assert "stop" not in completions.requests[0] and b.server_reports_stop_reason
    assert reason == "stop"  # stop_reason names one of our stop strings
    second = await _collect(b, "P", GREEDY, stop)
    assert completions.requests[1]["stop"] == stop
    assert (
        first
        == second
        == [
            Token("x", -0.1),
            Token(" =", -0.2),
            Token(" 1", -0.3),
            Token("\n", -0.4),
            Token("```", -0.5),
            Token("\n", -0.6),
        ]
    )
    end = [_vllm_choice("ok", ["ok", "<|im_end|>"], [-0.1, -0.2], "stop", None)]
    completions.chunks = end
    assert await _run(b, "P", GREEDY, stop) == ([Token("ok", -0.1)], "eos")


VERDICT = {
    "type": "object",
    "properties": {"verdict": {"enum": ["right", "wrong"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}


async def test_a_json_schema_goes_in_each_servers_field_and_holds_the_reply(backend):
    """stream_json on the real llama_cpp.server (it reads ``grammar``); vLLM reads ``response_format``
    and llama-server ``json_schema`` (checked on the request)."""
    ask = _prompt("Is 17 * 23 = 391 right? Answer in a sentence.")
    free = _text(await _collect(backend, ask, GREEDY))
    assert not free.lstrip().startswith("{")  # so the check below can fail
    stream = backend.stream_json(ask, GREEDY, VERDICT)
    reply = json.loads(_text([t async for t in stream]))
    assert reply in ({"verdict": "right"}, {"verdict": "wrong"})
    request = backend._request("P", GREEDY, [], VERDICT)["extra_body"]
    assert request["response_format"] == {"type": "json_schema", "json_schema": {"name": "reply", "schema": VERDICT}}
    assert request["json_schema"] == VERDICT and 'root ::= "{"' in request["grammar"]
    assert "response_format" not in backend._request("P", GREEDY, []).get("extra_body", {})
