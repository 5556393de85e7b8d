"""LlamaCppBackend against a real model (SmolLM2-135M, n_ctx 2048), compared with llama-cpp-python itself."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import numpy as np
import pytest

from tuiagent.backends.base import ContextOverflow
from tuiagent.backends.llama_model import default_threads
from tuiagent.errors import ConfigError
from tuiagent.protocol import Sampling, Token

pytestmark = pytest.mark.slow

N_CTX = 2048
GREEDY = Sampling(temperature=0.0, max_tokens=48)
QUESTION = "Write a Python function that returns the sum of the squares of a list of numbers."


@pytest.fixture(scope="module")
def backend(smollm2_path):
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    b = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=N_CTX)
    yield b
    asyncio.run(b.aclose())


@pytest.fixture(scope="module")
def reference(smollm2_path):
    """llama-cpp-python's own model with logits for every position (what logprobs= needs)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(smollm2_path), n_ctx=N_CTX, n_threads=default_threads(), logits_all=True, verbose=False)
    yield llm
    llm.close()


def chat(backend, text: str) -> str:
    return backend.render_chat([{"role": "user", "content": text}])


async def run(backend, prompt: str, sampling: Sampling = GREEDY, stop=()) -> tuple[list[Token], str | None]:
    """The tokens of one stream and its stop reason."""
    stream = backend.stream(prompt, sampling, list(stop))
    return [t async for t in stream], stream.stop_reason


async def collect(backend, prompt: str, sampling: Sampling = GREEDY, stop=()) -> list[Token]:
    return (await run(backend, prompt, sampling, stop))[0]


def text_of(tokens: list[Token]) -> str:
    return "".join(t.text for t in tokens)


def test_importing_tuiagent_does_not_import_llama_cpp():
    code = "import tuiagent, tuiagent.backends, sys; assert 'llama_cpp' not in sys.modules, 'llama_cpp imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def reference_greedy(reference, prompt: str, n: int, split: int | None = None) -> tuple[list[int], list[float]]:
    """llama-cpp-python's own greedy tokens and their logprobs (log-softmax of its logits_all scores).

    ``split``: evaluate the prompt as two batches, the last ``split`` tokens apart (llama.cpp's CPU
    kernels give slightly different logits for different batch shapes, so layouts must match).
    """
    from llama_cpp import Llama

    ids = reference.tokenize(prompt.encode(), add_bos=False, special=True)
    reference.reset()
    if split:
        reference.eval(ids[:-split])
        reference.eval(ids[-split:])
    tokens: list[int] = []
    # With the prompt already evaluated, generate() finds it cached and samples at once.
    for tok in reference.generate(ids, temp=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
        tokens.append(tok)
        if len(tokens) == n:
            break
    rows = Llama.logits_to_logprobs(reference.scores[len(ids) - 1 : len(ids) - 1 + n])
    return tokens, [float(rows[i, tok]) for i, tok in enumerate(tokens)]


async def test_greedy_tokens_and_logprobs_match_llama_cpp(backend, reference):
    prompt = chat(backend, QUESTION)
    backend.reset_cache()  # one batch for the whole prompt, as the reference does
    ours, reason = await run(backend, prompt)
    ids = backend.last_token_ids
    assert reason == "length" and len(ours) == len(ids) == GREEDY.max_tokens
    theirs, expected = reference_greedy(reference, prompt, len(ids))
    assert ids == theirs
    np.testing.assert_allclose([t.logprob for t in ours], expected, atol=1e-4, rtol=0)
    # The texts are the tokens' own bytes, in order.
    assert text_of(ours).encode() == b"".join(backend.piece(t) for t in ids)


async def test_stop_strings_are_not_yielded(backend):
    prompt = chat(backend, QUESTION)
    free = await collect(backend, prompt)
    full = text_of(free)
    # A common single-token stop, and one that straddles a token boundary.
    common = next(s for s in ("\n", " the", ",", " ") if full.find(s) > 0)
    i = next(i for i in range(3, len(free) - 1) if len(free[i].text) >= 2 and len(free[i + 1].text) >= 2)
    straddling = free[i].text[-2:] + free[i + 1].text[:2]
    for stop in (common, straddling):
        out, reason = await run(backend, prompt, stop=[stop])
        assert reason == "stop", stop
        assert text_of(out) == full[: full.find(stop)], stop
        assert stop not in text_of(out)


async def test_eos_and_length(backend):
    out, reason = await run(backend, chat(backend, "What is the capital of France?"), Sampling(max_tokens=100))
    assert reason == "eos"
    assert "Paris" in text_of(out) and "<|im_end|>" not in text_of(out)
    out, reason = await run(backend, chat(backend, QUESTION), Sampling(max_tokens=5))
    assert reason == "length" and len(out) == 5


async def test_two_streams_in_flight_each_get_their_own_stop_reason(backend):
    """One backend, two streams at once (the worker runs them in turn): each stream carries the
    reason its own generation ended, whichever finishes last."""
    france = chat(backend, "What is the capital of France?")
    short = backend.stream(chat(backend, QUESTION), Sampling(max_tokens=5), [])
    long = backend.stream(france, Sampling(max_tokens=100), [])
    cut = backend.stream(COUNTING, Sampling(max_tokens=1000), [])

    async def drain(stream):
        return [t async for t in stream]

    async def cancel_after_one(stream):
        async for _ in stream:
            await stream.aclose()

    five, paris, _ = await asyncio.gather(drain(short), drain(long), cancel_after_one(cut))
    assert (short.stop_reason, len(five)) == ("length", 5)
    assert long.stop_reason == "eos" and "Paris" in text_of(paris)
    assert cut.stop_reason == "cancelled"
    deadline = time.monotonic() + 5  # the worker lets go of the cancelled one at its next token
    while backend.busy and time.monotonic() < deadline:
        await asyncio.sleep(0.002)
    assert backend.alive and not backend.busy


async def test_prefix_reuse_evaluates_only_the_new_text(backend):
    prompt = chat(backend, "Compute 6*7 with Python. Put the code in a ```python block.")
    first = await collect(backend, prompt, Sampling(max_tokens=40))
    appended = "\n```output\n42\n```\nSo the result is"
    before = backend.stats.prompt_tokens_evaluated
    total_before = backend.stats.prompt_tokens_total
    second_prompt = prompt + text_of(first) + appended
    await collect(backend, second_prompt, Sampling(max_tokens=8))
    evaluated = backend.stats.prompt_tokens_evaluated - before
    assert backend.stats.prompt_tokens_total - total_before == backend.count_tokens(second_prompt)
    assert evaluated <= backend.count_tokens(appended) + 3, evaluated


async def test_same_prompt_again_is_bit_exact_and_reuses_whole_canonical_chunks(backend):
    """The prompt again after its own generation: evaluation goes back to the last whole chunk of
    the canonical layout (the cache after it holds generated tokens), so the tokens and every
    logprob are exactly the first call's."""
    from tuiagent.backends.llama_model import CANONICAL_CHUNK

    prompt = chat(backend, QUESTION)
    backend.reset_cache()
    first = await collect(backend, prompt, Sampling(max_tokens=12))
    first_ids = backend.last_token_ids
    before = backend.stats.prompt_tokens_evaluated
    again = await collect(backend, prompt, Sampling(max_tokens=12))
    n = backend.count_tokens(prompt)
    assert backend.stats.prompt_tokens_evaluated - before == n - (n - 1) // CANONICAL_CHUNK * CANONICAL_CHUNK
    assert backend.last_token_ids == first_ids
    assert [(t.text, t.logprob) for t in again] == [(t.text, t.logprob) for t in first]


async def test_runs_are_bit_exact_whatever_ran_before(backend):
    """A run's tokens and logprobs do not depend on what the model did before it: three prompts in
    three orders, each generation identical to the same prompt's in the other orders."""
    prompts = [chat(backend, q) for q in (QUESTION, "What is 17 * 23? Answer briefly.", "Name three prime numbers.")]
    seen: dict[str, list[tuple[str, float | None]]] = {}
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        for i in order:
            out = [(t.text, t.logprob) for t in await collect(backend, prompts[i], Sampling(max_tokens=16))]
            assert seen.setdefault(prompts[i], out) == out, (order, i)


COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"  # a raw prompt the model continues for a long time


async def _cancel_after(backend, n: int, how: str) -> tuple[float, str | None]:
    """Seconds until the worker let go of a stream cancelled (or closed) after ``n`` tokens, and
    that stream's stop reason."""
    got: list[Token] = []
    seen = asyncio.Event()
    agen = backend.stream(COUNTING, Sampling(max_tokens=1000), [])

    async def consume():
        async for t in agen:
            got.append(t)
            if len(got) >= n:
                seen.set()
                if how == "aclose":
                    await agen.aclose()
                    return
        # how == "cancel": keeps waiting for tokens until the task is cancelled

    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen.wait(), 30)
    t0 = time.monotonic()
    if how == "cancel":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        await task
    # The worker process lets go of the model at the next token.
    deadline = time.monotonic() + 5
    while backend.busy and time.monotonic() < deadline:
        await asyncio.sleep(0.002)
    assert not backend.busy
    return time.monotonic() - t0, agen.stop_reason


@pytest.mark.parametrize("how", ["cancel", "aclose"])
async def test_cancellation_is_prompt_and_the_backend_stays_usable(backend, how):
    generated = backend.stats.generated_tokens
    elapsed, reason = await _cancel_after(backend, 3, how)
    assert elapsed < 1.0
    assert reason == "cancelled"
    assert backend.stats.generated_tokens - generated < 30  # not the 1000 it was allowed
    out, reason = await run(backend, chat(backend, "What is the capital of France?"), Sampling(max_tokens=100))
    assert "Paris" in text_of(out) and reason == "eos"
    assert backend.alive and not backend.busy


async def test_utf8_characters_split_across_tokens_are_whole(backend):
    prompt = chat(backend, "Repeat exactly: 🌞 ☀️ 太陽 😀 café")
    out = await collect(backend, prompt, Sampling(max_tokens=40))
    text = text_of(out)
    assert "\ufffd" not in text
    assert any(ord(c) > 0xFFFF for c in text)  # an emoji came through
    assert any(t.text == "" for t in out)  # ...from tokens that each held part of it
    assert len(out) == len(backend.last_token_ids)
    # Only an incomplete character cut off by max_tokens at the very end is left out.
    assert text == b"".join(backend.piece(t) for t in backend.last_token_ids).decode("utf-8", "ignore")


async def test_prompt_longer_than_the_context_is_a_clear_error(backend):
    with pytest.raises(ContextOverflow, match="context of 2048 tokens"):
        await collect(backend, "word " * 3000)


def test_gguf_template_matches_chatml_for_smollm2(smollm2_path, backend):
    from tuiagent.backends.templates import render_chatml

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    backend.chat_template = "gguf"
    try:
        assert backend.render_chat(messages) == render_chatml(messages)
    finally:
        backend.chat_template = "chatml"


def test_broken_model_file_is_a_config_error(tmp_path, smollm2_path):
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    broken = tmp_path / "broken.gguf"
    with open(smollm2_path, "rb") as f:
        broken.write_bytes(f.read(1 << 20))
    with pytest.raises(ConfigError) as err:
        LlamaCppBackend(broken, n_ctx=256, n_threads=1, expected_size=smollm2_path.stat().st_size)
    assert str(broken) in str(err.value) and "assemble" in str(err.value)


async def test_open_backend_from_models_toml(smollm2_path):
    """The product path: models.toml entry -> resolve_model_file -> create()."""
    try:
        from tuiagent.config.loader import load_models
    except ImportError:
        pytest.skip("tuiagent.config.loader is not available")
    from tuiagent.backends import open_backend

    spec = load_models().get("smollm2-135m")
    try:
        b = open_backend(spec)
    except ConfigError as e:  # not installed the product way (only the env-var fallback is set)
        pytest.skip(str(e))
    try:
        assert b.model_id == "smollm2-135m" and b.n_ctx == spec.context_size
        out = await collect(b, b.render_chat([{"role": "user", "content": "Say hi."}]), Sampling(max_tokens=4))
        assert len(out) >= 1 and all(t.logprob is not None and t.logprob <= 0 for t in out)
    finally:
        await b.aclose()


def test_the_worker_exits_when_the_app_is_killed(smollm2_path):
    """kill -9 of the process that holds the model: its worker sees the socket close and exits."""
    import psutil

    code = (
        "import sys\nfrom tuiagent.backends.llama_cpp import LlamaCppBackend\n"
        f"b = LlamaCppBackend({str(smollm2_path)!r}, n_ctx=256, n_threads=1)\n"
        "print(b.worker_pid, flush=True)\nsys.stdin.read()\n"
    )
    app = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        worker = psutil.Process(int(app.stdout.readline()))
        assert "tuiagent.backends.llama_worker" in " ".join(worker.cmdline())
        app.kill()
        app.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if worker.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.02)
        else:
            worker.kill()
            pytest.fail("the model worker outlived its app")
    finally:
        app.kill()


async def _tokens_of(stream) -> list[tuple[str, float | None]]:
    return [(t.text, t.logprob) async for t in stream]


async def test_a_recorded_run_is_rebuilt_exactly_by_decoding_its_turns_again(backend):
    """What a fork does: a two-turn run (the second turn extends the first), other work on the
    model, then the first turn's sampled ids decoded again (``replay``): the replayed tokens and the
    second turn streamed again are bit-identical to the originals. Evaluating the second prompt
    fresh instead (what continuing from the text alone would do) gives different numbers."""
    first_prompt = chat(backend, "Compute 6*7 with Python. Put the code in a ```python block.")
    first = backend.stream(first_prompt, Sampling(max_tokens=24), [])
    first_tokens = await _tokens_of(first)
    assert first.layout == "fresh" and len(first.token_ids) == 24
    second_prompt = first_prompt + "".join(t for t, _ in first_tokens) + "\n```output\n42\n```\nSo the result is"
    second = backend.stream(second_prompt, Sampling(max_tokens=12), [])
    second_tokens = await _tokens_of(second)
    assert second.layout == "extend"

    await collect(backend, chat(backend, "Name three prime numbers."))
    backend.fresh()
    replayed = backend.replay(first_prompt, first.token_ids, [])
    assert await _tokens_of(replayed) == first_tokens and replayed.layout == "fresh"
    again = backend.stream(second_prompt, Sampling(max_tokens=12), [])
    assert await _tokens_of(again) == second_tokens and again.layout == "extend"

    backend.fresh()
    from_text = backend.stream(second_prompt, Sampling(max_tokens=12), [])
    from_text_tokens = await _tokens_of(from_text)
    assert from_text.layout == "fresh"
    assert [lp for _, lp in from_text_tokens] != [lp for _, lp in second_tokens]


@pytest.mark.parametrize(
    "user, expected",
    [
        ({}, {"GOMP_SPINCOUNT": "300"}),  # ours: a short spin (see llama_model's docstring)
        ({"OMP_WAIT_POLICY": "passive"}, {"OMP_WAIT_POLICY": "passive"}),  # the user's choice wins
        ({"GOMP_SPINCOUNT": "0"}, {"GOMP_SPINCOUNT": "0"}),
    ],
)
def test_the_worker_gets_our_openmp_wait_unless_the_user_chose_one(smollm2_path, user, expected):
    """libgomp reads these when the worker loads llama.cpp: they must be in the worker's environment."""
    import os

    import psutil

    from tuiagent.backends.llama_model import OPENMP_SPIN_COUNT

    assert OPENMP_SPIN_COUNT == "300"
    names = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in names} | user
    code = (
        "import sys\nfrom tuiagent.backends.llama_cpp import LlamaCppBackend\n"
        f"b = LlamaCppBackend({str(smollm2_path)!r}, n_ctx=256, n_threads=1)\n"
        "print(b.worker_pid, flush=True)\nsys.stdin.read()\n"
    )
    app = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        worker_env = psutil.Process(int(app.stdout.readline())).environ()
        assert {k: worker_env[k] for k in names if k in worker_env} == expected
    finally:
        app.stdin.close()
        app.wait(timeout=30)


def test_loading_the_tokenizer_leaves_the_terminal_alone(smollm2_path, monkeypatch, capfd):
    """The app's process loads the tokenizer while its screen is drawn: the load neither points the
    standard descriptors elsewhere (llama-cpp-python's verbose=False does, and the screen updates
    written meanwhile were lost; issue 39 item 4) nor prints anything on them."""
    import os

    from tuiagent.backends.llama_model import Vocab

    real_dup2, redirected = os.dup2, []
    monkeypatch.setattr(os, "dup2", lambda fd, fd2, *a: redirected.append(fd2) or real_dup2(fd, fd2, *a))
    vocab = Vocab.load(str(smollm2_path))
    assert vocab.tokenize("hello") and redirected == []
    assert capfd.readouterr() == ("", "")
