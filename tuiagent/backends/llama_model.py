"""A GGUF model in this process through llama-cpp-python: generation with the log-probability of
every sampled token. It runs inside the model worker process (``llama_worker``); the app talks to
it through ``LlamaCppBackend``.

Logprobs are read from the last row of logits (``logits_all=False``). Prompts are evaluated in a
canonical layout (``chunk``-token chunks at absolute positions), so a run's tokens depend only on
the model, its prompt, settings and its own history, never on what ran before; each generation
reports its ``layout`` ("extend" or "fresh") and ``generate(..., forced=ids)`` decodes recorded
ids again, which is what a fork needs. ``openmp_defaults`` sets a short OpenMP spin
(``GOMP_SPINCOUNT``) before llama_cpp is imported. Why and how, with the measurements:
docs/models.md ("llama_cpp"), docs/install.md ("How llama.cpp's threads wait").
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import io
import math
import os
import threading
import time
from collections.abc import Callable, Generator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuiagent.backends.stops import StopMatcher
from tuiagent.errors import ConfigError
from tuiagent.protocol import Layout, Sampling, Token

# [ours, bench/bench_openmp_wait.py] libgomp spins at a barrier before it sleeps (about 100
# spins a microsecond by its own estimate); see the module docstring.
OPENMP_SPIN_COUNT = "300"

# llama.cpp 0.3.36's tiled K-quant matmul (ggml-cpu/tiled/tiled.cpp, on by default) takes weights that
# were not repacked (Q6_K here) in steps of 8 or more columns, with other rounding than the
# per-column path; these variables turn it off or force it at every width. They decide a
# generation's numbers (the engine fingerprint names them); the batched engine stays exact whatever
# they say (llama_batch.STEP_COLUMNS).
TILED_MM_VARIABLES = ("GGML_CPU_TILED_MM", "GGML_CPU_TILED_MM_FORCE")

# llama.cpp's "pick a random seed" value (LLAMA_DEFAULT_SEED).
RANDOM_SEED = 0xFFFFFFFF
# [ours] The canonical prompt chunk: small enough that the shared system prompt fills whole chunks
# (reused by every run), large enough for llama.cpp's batched matmul (see bench/bench_llama.py).
CANONICAL_CHUNK = 64


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


class Cancelled(Exception):
    """The consumer went away: generation stopped between tokens or prompt chunks."""


@dataclass
class Generation:
    """What one ``generate`` call did: why it stopped, every sampled id (an end token included), timings."""

    reason: str = "length"
    token_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    prompt_evaluated: int = 0
    layout: Layout = "fresh"  # "extend": continued the previous call's cache; "batched": llama_batch's engine
    seconds: dict[str, float] = field(default_factory=dict)


def logprob_of(logits: np.ndarray, token: int, buf: np.ndarray) -> float:
    """log p(token) under one row of logits: logit - logsumexp (``buf``: scratch of the row's size)."""
    m = float(logits.max())
    np.subtract(logits, np.float32(m), out=buf)
    np.exp(buf, out=buf)
    return float(logits[token]) - m - math.log(float(buf.sum(dtype=np.float64)))


def openmp_defaults(env: MutableMapping[str, str]) -> None:
    """Our OpenMP wait (a short spin, see the module docstring) unless ``env`` names one already."""
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT


def default_threads(env: Mapping[str, str] = os.environ) -> int:
    """llama.cpp's threads when a model's options name none: ``OMP_NUM_THREADS`` when it is a positive
    number (the usual way to keep a program to fewer CPUs on a shared machine), else every CPU this
    process may run on (its affinity: ``taskset``, a container's cpuset), not every CPU the machine has."""
    wanted = env.get("OMP_NUM_THREADS", "").strip()
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    return len(os.sched_getaffinity(0)) or 1


def import_llama_cpp() -> Any:
    openmp_defaults(os.environ)
    try:
        import llama_cpp
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigError(
            f"the llama_cpp backend needs llama-cpp-python ({e})",
            fix="pip install 'tuiagent[llama]'  (llama-cpp-python==0.3.36), or run `make run` in a checkout",
        ) from None
    return llama_cpp


# llama-cpp-python 0.3.36's converter lets a JSON string hold raw control characters, which JSON
# forbids: a small judge then writes a newline inside a string and its reply does not parse. [ours]
_LAX_CHAR = r'char ::= [^"\\]'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F]'


def json_gbnf(schema: str) -> str:
    """The GBNF grammar of the JSON schema ``schema`` (its JSON text): llama-cpp-python's converter,
    with strings held to JSON's characters."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    grammar: str = json_schema_to_gbnf(schema)
    return grammar.replace(_LAX_CHAR, _JSON_CHAR, 1)


def json_grammar(schema: str | None) -> Any:
    """The llama.cpp grammar holding a generation to the JSON schema ``schema`` (its JSON text); None for None."""
    if schema is None:
        return None
    from llama_cpp.llama_grammar import LlamaGrammar

    return LlamaGrammar.from_string(json_gbnf(schema), verbose=False)


def _silence(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """A llama.cpp log callback that drops everything."""


_SILENT_LOG: Any = None


def system_info() -> str:
    """llama.cpp's own report of the instruction sets it was built with ("AVX2 = 1 | ..."). Reading
    it runs no model code, so it is safe even in a process whose build crashes at the first decode."""
    info: bytes = import_llama_cpp().llama_print_system_info()
    return info.decode("utf-8", "replace").strip()


class Vocab:
    """A model's tokenizer and chat template: cheap to load (``vocab_only``), no weights, no compute."""

    def __init__(self, llm: Any, llama_cpp: Any):
        self._lc = llama_cpp
        self.llm = llm
        self.vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._is_eog = getattr(llama_cpp, "llama_vocab_is_eog", None) or llama_cpp.llama_token_is_eog
        self.eos = llm.token_eos()
        self.bos = llm.token_bos()
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab)) and self.bos >= 0
        self._pieces: dict[int, bytes] = {}
        self._piece_buf = ctypes.create_string_buffer(256)

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation (end of sequence, end of turn)."""
        return bool(self._is_eog(self.vocab, token))

    @classmethod
    def load(cls, model_path: str) -> Vocab:
        """The tokenizer alone (in the app's process). llama.cpp's log is silenced here: this
        process holds the terminal (the app's screen), and a vocab-only context warns about its
        training context of 0. The worker keeps its log, in its own log file.

        ``verbose=False`` is not the way to quiet it: llama-cpp-python then points file descriptors 1
        and 2 at /dev/null for the whole load, and the app's screen updates written meanwhile (Textual
        writes to descriptor 2) are lost, leaving the old screen's rows on the terminal (issue 39
        item 4). Its Python prints (system info, metadata) go to a buffer instead."""
        global _SILENT_LOG
        llama_cpp = import_llama_cpp()
        if _SILENT_LOG is None:  # kept in a global: llama.cpp holds the pointer
            _SILENT_LOG = llama_cpp.llama_log_callback(_silence)
        llama_cpp.llama_log_set(_SILENT_LOG, ctypes.c_void_p(0))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, n_ctx=8, verbose=True)
        return cls(llm, llama_cpp)

    def tokenize(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Tokens of ``text`` with special tokens (``<|im_start|>``...) parsed as such."""
        tokens: list[int] = self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        if add_bos and self.add_bos and (not tokens or tokens[0] != self.bos):
            tokens.insert(0, self.bos)
        return tokens

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens as their text).

        Not ``Llama.detokenize``: in 0.3.36 it uses a 32-byte buffer and returns b"" for longer
        pieces (Qwen2.5 has 240 such tokens, e.g. runs of spaces used for code indentation).
        """
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = self._piece_buf
        n = self._lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        out = buf.raw[: max(n, 0)]
        self._pieces[token] = out
        return out

    def gguf_formatter(self, model_path: str, model_id: str) -> Any:
        """The chat formatter built from the template embedded in the GGUF."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(
                f"{model_path} has no embedded chat template (tokenizer.chat_template)",
                key=f"models.{model_id}.chat_template",
                fix='set chat_template = "chatml" (or "raw") for this model',
            )
        model = self.llm._model
        eos = model.token_get_text(self.eos) if self.eos >= 0 else ""
        bos = model.token_get_text(self.bos) if self.bos >= 0 else ""
        return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=True)

    def close(self) -> None:
        self.llm.close()


class LlamaModel:
    """The weights and one llama.cpp context; ``generate`` runs on the calling thread."""

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int,
        n_threads: int,
        n_batch: int,
        seed: int | None,
        min_p: float,
        prompt_chunk: int | None,
    ):
        llama_cpp = import_llama_cpp()
        self._lc = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=model_path,
            n_ctx=int(n_ctx),
            n_batch=int(n_batch),
            n_threads=int(n_threads),
            n_threads_batch=int(n_threads),
            logits_all=False,
            verbose=False,
        )
        # Llama(seed=0) would be taken as "random" (it does `seed or DEFAULT`): set it directly.
        self.default_seed = RANDOM_SEED if seed is None else int(seed) & 0xFFFFFFFF
        self.llm.set_seed(self.default_seed)
        self.vocab = Vocab(self.llm, llama_cpp)
        self.n_ctx = self.llm.n_ctx()
        self.n_vocab = self.llm.n_vocab()
        self.min_p = float(min_p)
        self.chunk = max(1, int(prompt_chunk or CANONICAL_CHUNK))
        self.canonical = 0  # leading cached tokens evaluated in the canonical layout (whole chunks)
        self._lp_buf = np.empty(self.n_vocab, dtype=np.float32)

    def logprob(self, token: int) -> float:
        """log p(token) under the logits of the last evaluated position."""
        ptr = self._lc.llama_get_logits_ith(self.llm.ctx, -1)
        return logprob_of(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)), token, self._lp_buf)

    def generate(
        self,
        tokens: list[int],
        sampling: Sampling,
        stop: Sequence[str],
        cancel: threading.Event,
        emit: Callable[[list[Token]], None],
        forced: Sequence[int] | None = None,
        schema: str | None = None,
        prefix: Sequence[int] | None = None,
    ) -> Generation:
        """Sample a continuation of ``tokens``; ``emit`` gets the tokens as they become safe to show.
        Raises ``Cancelled`` when ``cancel`` is set (checked once per token and between prompt chunks).

        ``forced``: decode these ids instead of sampling (a recorded turn, replayed exactly: the
        same evaluations in the same layout, and the logprobs the model gives them now).
        ``schema``: sample only what this JSON schema (its text) allows; logprobs stay the model's.
        ``prefix``: these ids in place of the first ones sampled, then sampling goes on (an edit
        fork's kept tokens and text, ``_resumed``)."""
        llm, vocab = self.llm, self.vocab
        out = Generation(prompt_tokens=len(tokens))
        t0 = time.perf_counter()
        out.prompt_evaluated, out.layout = self._eval_prompt(tokens, cancel)
        t1 = time.perf_counter()
        out.seconds["prompt_eval_s"] = t1 - t0

        if forced is not None:
            gen = self._decode(forced)
            max_new = len(forced)
        else:
            llm.set_seed(self.default_seed if sampling.seed is None else int(sampling.seed) & 0xFFFFFFFF)
            temp = float(sampling.temperature)

            def sample(prompt: list[int]) -> Generator[int, None, None]:
                sampled: Generator[int, None, None] = llm.generate(
                    prompt,
                    temp=temp if temp > 0 else 0.0,
                    top_k=int(sampling.top_k),
                    top_p=float(sampling.top_p),
                    min_p=self.min_p,
                    typical_p=1.0,
                    repeat_penalty=float(sampling.repeat_penalty),
                    reset=True,
                    grammar=json_grammar(schema),
                )
                return sampled

            gen = sample(tokens) if not prefix else self._resumed(sample, tokens, list(prefix))
            max_new = min(int(sampling.max_tokens), self.n_ctx - len(tokens))
        decoder = PieceDecoder(stop)
        ids = out.token_ids
        lp_time = 0.0
        try:
            if max_new <= 0:
                return out
            for tok in gen:
                # The logits that produced `tok` are still in the context: read them before the next eval.
                t = time.perf_counter()
                lp = self.logprob(tok)
                lp_time += time.perf_counter() - t
                ids.append(tok)
                if tok == vocab.eos or vocab.is_eog(tok):
                    out.reason = "eos"
                    break
                ready = decoder.feed(vocab.piece(tok), lp)
                if ready:
                    emit(ready)
                if decoder.stopped:
                    out.reason = "stop"
                    break
                if len(ids) >= max_new:
                    out.reason = "length"
                    break
                if cancel.is_set():
                    raise Cancelled
        finally:
            gen.close()
            out.seconds["generate_s"] = time.perf_counter() - t1
            out.seconds["logprob_s"] = lp_time
        rest = decoder.flush()
        if rest:
            emit(rest)
        return out

    def _decode(self, ids: Sequence[int]) -> Generator[int, None, None]:
        """``Llama.generate``'s evaluations without its sampling: each id is yielded while the
        logits that would have produced it are current, then evaluated alone (the last one is
        not, as a generation that ends there leaves it)."""
        for tok in ids:
            yield int(tok)
            self.llm.eval([int(tok)])

    def _resumed(
        self, sample: Callable[[list[int]], Generator[int, None, None]], tokens: list[int], prefix: list[int]
    ) -> Generator[int, None, None]:
        """Sampling with ``prefix`` in place of its first ids. While the sampled ids are the prefix's
        (an edit that changed nothing) this is the plain generation, sampler state included, so it
        goes on bit for bit as recorded; from the first id that differs the rest of the prefix is
        decoded a token at a time (as ``_decode``) and sampling starts again after it."""
        sampled = sample(tokens)
        n = 0
        try:
            for tok in sampled:
                if n < len(prefix) and tok != prefix[n]:
                    break  # not evaluated yet: the logits that chose it are still current
                n += 1
                yield tok
            else:
                return
        finally:
            sampled.close()
        for tok in prefix[n:]:
            yield tok
            self.llm.eval([tok])
        yield from sample(tokens + prefix)

    def fresh(self) -> None:
        """Make the next call fresh: drop what follows the canonical chunks (kept for reuse)."""
        llm = self.llm
        if int(llm.n_tokens) > self.canonical:
            if self.canonical > 0 and llm._ctx.kv_cache_seq_rm(-1, self.canonical, -1):
                llm.n_tokens = self.canonical
            else:
                self.reset()

    def _eval_prompt(self, tokens: list[int], cancel: threading.Event) -> tuple[int, Layout]:
        """Bring the KV cache to exactly ``tokens`` with fresh logits, in the layout the module
        docstring describes; returns how many tokens were evaluated, and the layout.

        Leaves the state ``Llama.generate`` (0.3.36) takes as "full prompt already cached", so it
        then samples without evaluating anything.
        """
        llm = self.llm
        n_past = int(llm.n_tokens)
        lim = min(n_past, len(tokens))
        common = 0
        if lim:
            diff = np.flatnonzero(llm.input_ids[:lim] != np.asarray(tokens[:lim], dtype=np.intc))
            common = int(diff[0]) if diff.size else lim
        extends = common == n_past and (n_past < len(tokens) or not getattr(llm, "_requires_eval", True))
        if extends:  # the same run's next turn (or the very same prompt with its logits still there)
            keep = n_past
        else:  # back to the last canonical chunk boundary inside the common prefix
            keep = min(self.canonical, common // self.chunk * self.chunk, (len(tokens) - 1) // self.chunk * self.chunk)
            if keep > 0 and llm._ctx.kv_cache_seq_rm(-1, keep, -1):
                llm.n_tokens = keep
            else:
                llm.reset()
                keep = 0
            self.canonical = keep
        canonical = keep == self.canonical  # evaluating from the canonical edge keeps the layout canonical
        start = keep
        while start < len(tokens):
            if cancel.is_set():
                raise Cancelled
            end = min(len(tokens), (start // self.chunk + 1) * self.chunk)  # up to the next chunk boundary
            llm.eval(tokens[start:end])
            start = end
            if canonical and end % self.chunk == 0:
                self.canonical = end
        return len(tokens) - keep, "fresh" if canonical else "extend"

    def reset(self) -> None:
        """Forget the evaluated tokens: the next prompt is evaluated from its start."""
        self.llm.reset()
        self.canonical = 0

    def close(self) -> None:
        self.llm.close()
