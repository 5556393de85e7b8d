"""VLLMBackend: the adapter against stand-ins of vLLM's shapes (vllm_standins.py), and one test
of the real engine on a CUDA machine (``gpu`` marker, model from TUIAGENT_VLLM_MODEL)."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import subprocess
import sys

import pytest

from tests.backends.vllm_standins import (
    EOS_ID,
    StandInEngine,
    StandInRequestOutputKind,
    StandInSamplingParams,
    StandInTokenizer,
    Step,
    steps,
)
from tuiagent.backends.base import BackendCrashed, ContextOverflow
from tuiagent.backends.vllm import VLLMBackend, VLLMError, _json_constraint, create
from tuiagent.config.spec import ModelSpec, Source
from tuiagent.errors import ConfigError
from tuiagent.protocol import Sampling, Token

FENCE = "```output"
CODE = steps(
    "Let",
    " me",
    " compute",
    ".\n",
    "```",
    "python",
    "\n",
    "print",
    "(",
    "5",
    ")",
    "\n",
    "```",
    "\n",
    "```",
    "output",
    "\n",
    "5",
    "\n",
)


def make(script, *, delta=True, tokenizer=None, context_size=4096, chat_template="chatml", **engine_kw):
    engine = StandInEngine(script, **engine_kw)
    backend = VLLMBackend(
        engine,
        model_id="stand-in",
        sampling_params=StandInSamplingParams,
        delta_kind=StandInRequestOutputKind.DELTA if delta else None,
        tokenizer=tokenizer,
        chat_template=chat_template,
        context_size=context_size,
    )
    return backend, engine


SAMPLING = Sampling(max_tokens=100)


async def run(backend, sampling=SAMPLING, stop=(), prompt="P"):
    """The tokens of one stream and its stop reason."""
    stream = backend.stream(prompt, sampling, list(stop))
    return [t async for t in stream], stream.stop_reason


async def collect(backend, sampling=SAMPLING, stop=(), prompt="P"):
    return (await run(backend, sampling, stop, prompt))[0]


def text(tokens):
    return "".join(t.text for t in tokens)


@pytest.mark.parametrize("delta", [True, False], ids=["delta", "cumulative"])
async def test_text_deltas_with_the_sampled_tokens_logprobs(delta):
    script = steps(("```", -0.5), ("python", -0.01), ("\n", -0.001), ("x", -2.0), (" = ", -0.3))
    backend, engine = make(script, delta=delta)
    tokens, reason = await run(backend)
    assert tokens == [
        Token("```", -0.5),
        Token("python", -0.01),
        Token("\n", -0.001),
        Token("x", -2.0),
        Token(" = ", -0.3),
    ]
    assert reason == "eos"  # the end-of-sequence token is not yielded
    assert engine.aborted == [] and len(engine.closed) == 1
    assert backend.stats.generated_tokens == len(script) and backend.stats.calls == 1
    assert backend.stats.prompt_tokens_total == 4


async def test_the_logprob_is_the_sampled_tokens_not_the_top_ones():
    script = [Step("a", -1.7, token_id=11, top_text="b", top_logprob=-0.2), *steps(("c", -0.1))]
    backend, _ = make(script)
    assert await collect(backend) == [Token("a", -1.7), Token("c", -0.1)]


async def test_sampling_params_sent_to_vllm():
    backend, engine = make(steps("x"))
    await collect(
        backend, Sampling(temperature=0.7, top_p=0.9, top_k=0, repeat_penalty=1.1, max_tokens=50, seed=3), ["</s>", ""]
    )
    params = engine.requests[0][1]
    assert (params.temperature, params.top_p, params.repetition_penalty, params.max_tokens, params.seed) == (
        0.7,
        0.9,
        1.1,
        50,
        3,
    )
    assert params.top_k == -1  # off: not sent, vLLM's default
    assert params.stop == ["</s>"] and params.logprobs == 1
    assert params.output_kind is StandInRequestOutputKind.DELTA
    await collect(backend, Sampling(top_k=20))
    assert engine.requests[1][1].top_k == 20


@pytest.mark.parametrize("delta", [True, False], ids=["delta", "cumulative"])
async def test_a_stop_string_cut_by_vllm(delta):
    backend, engine = make(CODE, delta=delta)
    tokens, reason = await run(backend, stop=[FENCE])
    assert text(tokens) == "Let me compute.\n```python\nprint(5)\n```\n"
    assert reason == "stop"
    assert all(t.logprob is not None for t in tokens)
    assert FENCE not in text(tokens)
    assert engine.aborted == []  # vLLM finished the request itself


async def test_the_adapter_stops_where_the_engine_does_not_and_aborts():
    backend, engine = make(CODE, honor_stop=False)
    tokens, reason = await run(backend, stop=[FENCE])
    assert text(tokens) == "Let me compute.\n```python\nprint(5)\n```\n"
    assert reason == "stop"
    assert engine.aborted == [engine.requests[0][2]] and engine.closed == [engine.requests[0][2]]
    assert engine.steps_taken == 16  # it stopped at "output", the token that completed the fence


async def test_a_stop_string_inside_one_token_keeps_the_text_before_it():
    backend, _ = make(steps(("ab", -0.1), ("c```outputd", -0.2)))
    assert await run(backend, stop=[FENCE]) == ([Token("ab", -0.1), Token("c", -0.2)], "stop")


async def test_finish_reasons():
    backend, _ = make(steps("a", "b", "c", "d"))
    tokens, reason = await run(backend, Sampling(max_tokens=2))
    assert text(tokens) == "ab" and reason == "length"
    tokens, reason = await run(backend)
    assert text(tokens) == "abcd" and reason == "eos"


@pytest.mark.parametrize("how", ["cancel", "close"])
async def test_closing_the_stream_aborts_the_request(how):
    backend, engine = make(steps(*["tok"] * 200), delay=0.01)
    seen = []
    gen = backend.stream("P", Sampling(max_tokens=500), [])
    if how == "cancel":

        async def consume():
            async for t in gen:
                seen.append(t)

        task = asyncio.create_task(consume())
        while len(seen) < 3:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        async for t in gen:
            seen.append(t)
            if len(seen) == 3:
                break
        await gen.aclose()
    assert gen.stop_reason == "cancelled"
    request_id = engine.requests[0][2]
    assert engine.aborted == [request_id] and engine.closed == [request_id]
    taken = engine.steps_taken
    await asyncio.sleep(0.05)
    assert engine.steps_taken == taken  # nothing more was generated


async def test_hf_chat_template_and_token_counts_use_the_tokenizer():
    tok = StandInTokenizer()
    backend, _ = make(steps("x"), tokenizer=tok, chat_template="hf")
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert backend.render_chat(messages) == "[system]S[/][user]U[/][assistant]"
    assert ("apply_chat_template", {"tokenize": False, "add_generation_prompt": True}) in tok.calls
    assert backend.count_tokens("one two three") == 3
    assert ("encode", {"add_special_tokens": False}) in tok.calls


def test_named_templates():
    backend, _ = make(steps("x"), chat_template="chatml")
    assert backend.render_chat([{"role": "user", "content": "U"}]).endswith("<|im_start|>assistant\n")


async def test_prompt_longer_than_the_context():
    backend, engine = make(steps("x"), tokenizer=StandInTokenizer(), context_size=8)
    with pytest.raises(ContextOverflow) as err:
        await collect(backend, prompt="w " * 8)
    assert (err.value.prompt_tokens, err.value.context_size) == (8, 8)
    assert engine.requests == []
    # A prompt that fits leaves max_tokens the room that is left.
    await collect(backend, Sampling(max_tokens=100), prompt="w w w")
    assert engine.requests[0][1].max_tokens == 5


async def test_the_engines_own_length_error_is_context_overflow():
    class Refusing(StandInEngine):
        async def generate(self, prompt, sampling_params, request_id):
            raise ValueError(
                "The decoder prompt (length 5000) is longer than the maximum model length of 4096. "
                "Make sure that `max_model_len` is no smaller than the number of text tokens."
            )
            yield  # pragma: no cover

    backend = VLLMBackend(Refusing([]), model_id="m", sampling_params=StandInSamplingParams)
    with pytest.raises(ContextOverflow) as err:
        await collect(backend)
    assert (err.value.prompt_tokens, err.value.context_size) == (5000, 4096)


async def test_eos_token_id_stays_out_of_the_text():
    backend, _ = make(steps("hi"))
    tokens = await collect(backend)
    assert tokens == [Token("hi", -0.01)] and backend.stats.generated_tokens == 2  # "hi" and EOS_ID
    assert EOS_ID == 2


def test_importing_does_not_import_vllm_or_torch():
    code = (
        "import sys, tuiagent.backends.openai, tuiagent.backends.vllm; "
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules and 'openai' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_create_checks_the_template_and_says_when_vllm_is_missing():
    src = Source(kind="path", path="/models/none")
    with pytest.raises(ConfigError, match="chat_template"):
        create(ModelSpec(id="m", backend="vllm", origin="t.toml", source=src, chat_template="gguf"))
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(VLLMError, match=r"pip install 'tuiagent\[vllm\]'"):
            create(ModelSpec(id="m", backend="vllm", origin="t.toml", source=src))


@pytest.mark.gpu
async def test_real_vllm_engine():
    model = os.environ.get("TUIAGENT_VLLM_MODEL")
    if not model:
        pytest.skip("set TUIAGENT_VLLM_MODEL to a small model directory or hub id")
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    spec = ModelSpec(
        id="vllm-test",
        backend="vllm",
        origin="test",
        source=Source(kind="path", path=model),
        context_size=2048,
        chat_template="hf",
        options={"gpu_memory_utilization": 0.3, "engine_args": {"enforce_eager": True}},
    )
    backend = await asyncio.to_thread(create, spec)
    try:
        prompt = backend.render_chat([{"role": "user", "content": "Write a Python code block that prints 5."}])
        tokens, reason = await run(backend, Sampling(max_tokens=64), ["```\n"], prompt=prompt)
        assert tokens and "```\n" not in text(tokens)
        assert all(t.logprob is not None and t.logprob <= 0 and math.isfinite(t.logprob) for t in tokens)
        assert reason in ("stop", "eos", "length")
        assert backend.count_tokens(text(tokens)) > 0

        gen = backend.stream(prompt, Sampling(max_tokens=500, temperature=0.8, seed=1), [])
        async for _ in gen:
            break
        await gen.aclose()  # aborts the request
        again, reason = await run(backend, Sampling(max_tokens=4), prompt=prompt)
        assert len(again) <= 4 and reason in ("length", "eos")
    finally:
        await backend.aclose()


async def test_a_dead_engine_process_is_backend_crashed():
    class EngineDeadError(RuntimeError):
        """Stand-in for vllm.v1.engine.exceptions.EngineDeadError (the engine-core process died)."""

    class Dying(StandInEngine):
        async def generate(self, prompt, sampling_params, request_id):
            async for out in super().generate(prompt, sampling_params, request_id):
                yield out
                raise EngineDeadError("EngineCore encountered an issue")

    backend = VLLMBackend(Dying(CODE), model_id="m", sampling_params=StandInSamplingParams)
    got = []
    with pytest.raises(BackendCrashed, match="engine process for 'm' died") as err:
        async for token in backend.stream("P", Sampling(max_tokens=100), []):
            got.append(token)
    assert got and "fix:" in str(err.value) and backend.engine.aborted == []


async def test_a_json_schema_reaches_vllms_structured_outputs():
    schema = {"type": "object", "properties": {"verdict": {"enum": ["yes", "no"]}}}
    engine = StandInEngine(steps('{"verdict": "no"}'))
    backend = VLLMBackend(
        engine,
        model_id="stand-in",
        sampling_params=StandInSamplingParams,
        json_constraint=lambda s: {"structured_outputs": ("json", s)},
    )
    assert text(await collect_stream(backend.stream_json("P", SAMPLING, schema))) == '{"verdict": "no"}'
    assert engine.requests[0][1].structured_outputs == ("json", schema)
    await collect(backend)
    assert engine.requests[1][1].structured_outputs is None  # a free generation stays free
    plain, _ = make(steps("x"))  # a vLLM without structured outputs
    with pytest.raises(VLLMError, match="no structured outputs.*without --judge-json"):
        await collect_stream(plain.stream_json("P", SAMPLING, schema))
    if importlib.util.find_spec("vllm") is None:
        assert _json_constraint() is None  # no vLLM here: nothing to hold a reply with


async def collect_stream(stream):
    return [t async for t in stream]
