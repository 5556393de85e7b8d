"""The batched engine (``llama_batch``, a worker loaded with n_seq > 1) against the single-sequence
engine on a real model (SmolLM2-135M): several streams in flight, each with its own
prompt, stop strings, cancel and logprobs, and the exactness the module docstring claims."""

from __future__ import annotations

import asyncio
import json
import os
import threading

import pytest

from tuiagent.backends.llama_model import default_threads
from tuiagent.protocol import Sampling, Token

pytestmark = pytest.mark.slow

N_CTX = 1024
N_SEQ = 4
GREEDY = Sampling(temperature=0.0, max_tokens=32)
# Longer than two 64-token chunks, so new runs copy it from the store instead of evaluating it.
SYSTEM = (
    "You are a careful math assistant. Solve the problem by writing Python code in ```python "
    "blocks; the code runs in a Jupyter kernel and you see its output. "
) * 3
QUESTIONS = [
    "What is 17 times 23? Explain step by step.",
    "Write a Python function that returns the sum of the squares of a list of numbers.",
    "List three prime numbers greater than 50.",
    "What is the capital of France, and why is it famous?",
]
STOPS = [["\n\n"], ["def "], [","], ["Paris"]]


def engine_on(path, *, n_ctx: int, n_seq: int, **options):
    """A batched engine on the GGUF ``path`` with the backend's defaults (threads, batch, sampling)."""
    from tuiagent.backends.llama_batch import BatchEngine

    return BatchEngine(
        str(path),
        n_ctx=n_ctx,
        n_threads=default_threads(),
        n_batch=512,
        seed=None,
        min_p=0.0,
        prompt_chunk=None,
        n_seq=n_seq,
        **options,
    )


def prompt_of(backend, question: str) -> str:
    return backend.render_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])


@pytest.fixture(scope="module")
def batched(smollm2_path):
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    b = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=N_CTX, n_seq=N_SEQ)
    yield b
    asyncio.run(b.aclose())


@pytest.fixture(scope="module")
def single(smollm2_path):
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    b = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=N_CTX)
    yield b
    asyncio.run(b.aclose())


async def tokens_of(backend, prompt: str, stop=(), sampling: Sampling = GREEDY) -> tuple[list[Token], str | None]:
    stream = backend.stream(prompt, sampling, list(stop))
    return [t async for t in stream], stream.stop_reason


@pytest.fixture(scope="module")
def references(single):
    """Each question alone on the single-sequence engine: (tokens, reason), without and with its stop."""

    async def all_of():
        out = []
        for q, stop in zip(QUESTIONS, STOPS):
            out.append(
                (await tokens_of(single, prompt_of(single, q)), await tokens_of(single, prompt_of(single, q), stop))
            )
        return out

    return asyncio.run(all_of())


def test_the_worker_says_it_holds_n_seq_sequences(batched, single):
    assert batched.n_seq == N_SEQ and batched.info["kv_cells"] == N_CTX * 8  # 4, the store, 3 pads (repacked)
    assert batched.info["engine"] == "batched (weights repacked, steps padded to 4; ubatches of at most 4 columns)"
    assert single.n_seq is None and single.info["kv_cells"] == N_CTX


def test_the_engine_fingerprint_is_the_same_however_many_sequences_are_in_flight(batched, single, smollm2_path):
    """Runs are exact at any concurrency (test below on the default model), so an eval resumed at
    another --concurrency reuses its generations and does not warn of another engine."""
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    wider = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=N_CTX, n_seq=2 * N_SEQ)
    try:
        assert wider.engine == batched.engine and wider.engine.startswith("batched:")
    finally:
        asyncio.run(wider.aclose())
    assert single.engine != batched.engine and single.engine.startswith("single:")


async def test_concurrent_streams_each_get_exactly_their_own_text_and_logprobs(batched, references):
    """Four streams at once, different prompts and stop strings: each one's tokens, texts, logprobs
    and stop reason are bit for bit those of the same request alone on the single-sequence engine."""
    prompts = [prompt_of(batched, q) for q in QUESTIONS]
    results = await asyncio.gather(*(tokens_of(batched, p, stop) for p, stop in zip(prompts, STOPS)))
    for (tokens, reason), (_, (ref, ref_reason)) in zip(results, references):
        assert reason == ref_reason
        assert [(t.text, t.logprob) for t in tokens] == [(t.text, t.logprob) for t in ref]
    assert {reason for _, reason in results} >= {"stop"}  # the stop strings did cut somewhere
    # without stops, in flight together again (now every prompt's chunks come from its own cells)
    free = await asyncio.gather(*(tokens_of(batched, p) for p in prompts))
    assert [[(t.text, t.logprob) for t in toks] for toks, _ in free] == [
        [(t.text, t.logprob) for t in ref] for (ref, _), _ in references
    ]


async def test_cancelling_one_stream_leaves_the_others_going(batched, references):
    prompts = [prompt_of(batched, q) for q in QUESTIONS[:3]]
    victim = batched.stream(prompts[0], Sampling(temperature=0.0, max_tokens=400), [])
    got: list[Token] = []

    async def cancel_after_three():
        async for token in victim:
            got.append(token)
            if len(got) == 3:
                await victim.aclose()

    _, *others = await asyncio.gather(cancel_after_three(), *(tokens_of(batched, p) for p in prompts[1:]))
    assert len(got) == 3 and victim.stop_reason == "cancelled"
    for (tokens, _), ((ref, _), _) in zip(others, references[1:3]):
        assert [t.text for t in tokens] == [t.text for t in ref]
    await until(lambda: not batched.busy)


async def test_a_stream_joining_mid_batch_gets_its_own_text(batched, references):
    """The third request arrives while two others are generating: it reads its prompt between
    their decode steps, joins their batch and ends with the text it has alone."""
    first = [prompt_of(batched, q) for q in QUESTIONS[:2]]
    early = batched.stream(first[0], GREEDY, [])
    seen: list[Token] = []
    joined = asyncio.Event()

    order: list[str] = []

    async def drain_early():
        async for token in early:
            seen.append(token)
            order.append("early")
            if len(seen) == 4:
                joined.set()

    async def late():
        await joined.wait()
        stream = batched.stream(prompt_of(batched, QUESTIONS[2]), GREEDY, [])
        out = []
        async for token in stream:
            out.append(token)
            order.append("late")
        return out

    _, middle, late_tokens = await asyncio.gather(drain_early(), tokens_of(batched, first[1]), late())
    assert "early" in order[order.index("late") :]  # it did join while the early one was generating
    assert [t.logprob for t in seen] == [t.logprob for t in references[0][0][0]]
    assert [t.logprob for t in middle[0]] == [t.logprob for t in references[1][0][0]]
    assert [(t.text, t.logprob) for t in late_tokens] == [(t.text, t.logprob) for t in references[2][0][0]]


async def until(condition, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_a_runs_sequence_is_kept_for_it_while_its_session_lasts(smollm2_path):
    """Run A waits between turns (its kernel runs) while other requests come and go: its next turn
    still extends its own cells. Without sessions, B (a new run) takes A's sequence, the one used
    longest ago, and A's turn 2 has to read its whole prompt again."""
    from tuiagent.backends.llama_batch import Request

    engine = engine_on(smollm2_path, n_ctx=512, n_seq=2, repack=False)
    vocab = engine.vocab

    def generate(prompt: str, session: int | None):
        result: list = []
        pieces: list[str] = []
        engine.submit(
            Request(
                0,
                vocab.tokenize(prompt, add_bos=True),
                GREEDY,
                [],
                threading.Event(),
                lambda ts: pieces.extend(t.text for t in ts),
                result.append,
                None,
                session,
            )
        )
        while not result:
            engine.step()
        return result[0], "".join(pieces)

    try:
        for sessions, extends in (((1, None, 2), True), ((None, None, None), False)):
            a, c, b = sessions
            engine.reset()
            for s in engine.sequences:
                s.owner = None
            first, text = generate(prompt_of_plain(QUESTIONS[0]), a)  # run A, turn 1
            generate(prompt_of_plain(QUESTIONS[1]), c)  # a one-off request, on the other sequence
            generate(prompt_of_plain(QUESTIONS[2]), b)  # run B's first turn
            second, _ = generate(prompt_of_plain(QUESTIONS[0]) + text + "\n```output\n391\n```\n", a)
            assert (second.prompt_evaluated < 20) is extends, second.prompt_evaluated
        assert engine.stolen == 0
    finally:
        engine.close()


def prompt_of_plain(question: str) -> str:
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def test_a_prompt_as_long_as_a_sequence_is_refused_clearly(smollm2_path):
    from tuiagent.backends.llama_batch import CapacityError

    engine = engine_on(smollm2_path, n_ctx=256, n_seq=2)
    try:
        with pytest.raises(CapacityError, match="300 tokens; each of the engine's 2 sequences holds at most 256"):
            engine.generate([1] * 300, GREEDY, [], threading.Event(), lambda _: None)
        # the engine goes on serving
        out = engine.generate(
            engine.vocab.tokenize("1 + 1 =", add_bos=True),
            Sampling(temperature=0.0, max_tokens=3),
            [],
            threading.Event(),
            lambda _: None,
        )
        assert out.reason == "length" and len(out.token_ids) == 3
    finally:
        engine.close()


@pytest.fixture(scope="module")
def qwen_path():
    from tests.backends.conftest import _resolve

    path, why = _resolve("qwen2.5-coder-1.5b")
    if path is None or not path.is_file():
        pytest.skip(f"the default model's GGUF is not here: {why or path}")
    return path


# Eight prompts: the four questions, asked again with other numbers and words.
MANY = [
    *QUESTIONS,
    *(f"What is {a} times {b}? Explain step by step." for a, b in ((19, 29), (31, 37))),
    "List three prime numbers greater than 90.",
    "How many days are there in 7 weeks?",
]


@pytest.mark.parametrize("repack", [True, False], ids=["repacked-padded", "plain"])
def test_on_the_default_model_a_sequence_is_the_same_alone_and_beside_any_number_of_others(qwen_path, repack):
    """The default model (Q4_K_M: Q4_K weights llama.cpp repacks on AVX2/AVX-512, where 4 columns take
    a gemm and fewer a gemv; Q6_K ones it does not repack, which its tiled matmul takes in ubatches
    of 8 columns or more). Each sequence alone, then beside 2 others (a step of 3, padded to 4), 3,
    4 and 7 others: tokens and logprobs bit for bit the same, with repacked weights (steps padded
    to groups of 4 columns) and with plain ones (a step of 8 takes the tiled matmul), and the same
    on an engine of 4 sequences and of 8; so an eval's results do not depend on its concurrency.
    Free sequences between busy ones (held by another session) leave holes a step fills."""
    from tuiagent.backends.llama_batch import Request

    assert not {"GGML_CPU_TILED_MM", "GGML_CPU_TILED_MM_FORCE"} & set(os.environ)  # llama.cpp's default: on
    sampling = Sampling(temperature=0.0, max_tokens=3)  # two decode steps after the prompt

    def runner(engine):
        prompts = [engine.vocab.tokenize(q, add_bos=True) for q in MANY]  # short: prompts cost the most here

        def run(ids: list[int], held: tuple[int, ...] = ()) -> dict:
            for h in held:  # another run's session holds these: requests go around them
                engine.sequences[h].owner = -1 - h
            out: dict = {}
            for i in ids:
                got: list[Token] = []
                engine.submit(
                    Request(
                        i,
                        prompts[i],
                        sampling,
                        [],
                        threading.Event(),
                        got.extend,
                        lambda r, i=i, got=got: out.__setitem__(i, (r.token_ids, [t.logprob for t in got])),
                    )
                )
            while not engine.idle:
                engine.step()
            for h in held:
                engine.sequences[h].owner = None
            engine.reset()
            return out

        return run

    def engine_of(n_seq: int):
        return engine_on(qwen_path, n_ctx=256, n_seq=n_seq, repack=repack)

    engine = engine_of(8)
    try:
        run = runner(engine)
        alone = {}
        for i in range(8):
            alone.update(run([i]))
        assert run(list(range(8))) == alone and engine.max_in_flight == 8  # beside 7 others
        five = [0, 2, 3, 5, 7]
        assert run(five, held=(1, 4, 6)) == {i: alone[i] for i in five}  # beside 4, with holes
        three = [1, 4, 6]
        assert run(three, held=(2,)) == {i: alone[i] for i in three}  # beside 2: a step of 3, padded
    finally:
        engine.close()
    small = engine_of(4)
    try:
        run = runner(small)
        assert run([0, 1, 2, 3]) == {i: alone[i] for i in range(4)} and small.max_in_flight == 4  # the size
        assert run([0, 2, 3], held=(1,)) == {i: alone[i] for i in (0, 2, 3)}  # changes nothing
    finally:
        small.close()


VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"enum": ["right", "wrong"]}, "why": {"type": "string", "maxLength": 40}},
    "required": ["verdict", "why"],
    "additionalProperties": False,
}


def _is_verdict(text: str) -> bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    return (
        isinstance(value, dict)
        and list(value) == ["verdict", "why"]
        and value["verdict"] in ("right", "wrong")
        and isinstance(value["why"], str)
        and len(value["why"]) <= 40
    )


async def test_a_json_schema_holds_a_reply_on_both_engines_and_only_its_own_sequence(batched, single, references):
    """stream_json (judges' structured outputs): SmolLM2, asked for a verdict, answers in prose; held to
    the schema it answers in the schema's JSON on both engines; and in a batch, free streams beside
    the held ones are bit for bit what they are alone (a grammar belongs to one sequence)."""
    sampling = Sampling(temperature=0.0, max_tokens=64)
    ask = "Is 17 * 23 = 391 right? Give your verdict."
    free_text = "".join(t.text for t in (await tokens_of(single, prompt_of(single, ask), sampling=sampling))[0])
    assert not _is_verdict(free_text)  # so the check below can fail
    for backend in (single, batched):
        stream = backend.stream_json(prompt_of(backend, ask), sampling, VERDICT_SCHEMA)
        tokens = [t async for t in stream]
        assert _is_verdict("".join(t.text for t in tokens)) and stream.stop_reason == "eos"
        assert all(t.logprob is not None and t.logprob <= 0 for t in tokens)
    held = [batched.stream_json(prompt_of(batched, q), sampling, VERDICT_SCHEMA) for q in QUESTIONS[:2]]

    async def text_of(stream):
        return "".join([t.text async for t in stream])

    results = await asyncio.gather(
        *(text_of(s) for s in held), *(tokens_of(batched, prompt_of(batched, q)) for q in QUESTIONS[2:])
    )
    assert all(_is_verdict(text) for text in results[:2])
    for (tokens, _), ((ref, _), _) in zip(results[2:], references[2:]):  # references without stops
        assert [(t.text, t.logprob) for t in tokens] == [(t.text, t.logprob) for t in ref]
