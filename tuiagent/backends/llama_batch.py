"""The batched local engine: several generations in flight on one model, in the model worker.

One llama.cpp context holds ``n_seq`` sequences, each in a KV stream of its own, plus a *store*
sequence with the latest fresh prompt's canonical chunks (new runs copy their system prompt from
it). Each ``step`` reads one prompt chunk of one sequence, then decodes one token for every
generating sequence in a single ``llama_decode``; requests join and leave between steps, and a
run keeps its sequence for its session. The eval, calibration and live compare columns use it.

Speed: a step covers every stream from id 0 to the last generating one (fillers for the others),
so it is one pass over the weights. Exactness: a sequence's tokens and logprobs are the same, bit
for bit, whatever else is in flight: cells never move, steps are padded to multiples of
``REPACK_GROUP`` columns with every filler asking for logits (plain weights for ``n_seq`` = 1),
and no decode ubatch is wider than ``STEP_COLUMNS``. Design, what each rule avoids, measurements:
docs/models.md ("The batched engine"), docs/evaluating.md ("Exactness", "Throughput").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuiagent.backends.llama_model import (
    CANONICAL_CHUNK,
    RANDOM_SEED,
    Cancelled,
    Generation,
    PieceDecoder,
    Vocab,
    import_llama_cpp,
    json_grammar,
    logprob_of,
)
from tuiagent.protocol import Sampling, Token

# [llama.cpp] Repacked weights (Q4_K, Q4_0, IQ4_NL on AVX2 / AVX-512) take a gemm for each group of
# this many batch columns and a gemv for the rest (ggml-cpu repack.cpp, forward_mul_mat).
REPACK_GROUP = 4
# [llama.cpp, bench/bench_tiled_mm.py] Its tiled K-quant matmul (ggml-cpu/tiled/tiled.cpp, on by
# default) takes weights that were not repacked (Q6_K here) in ubatches of 8 or more columns, with
# other rounding than the per-column path below that. A decode step is therefore made of ubatches
# of at most this many streams (a multiple of REPACK_GROUP, under 8), whatever GGML_CPU_TILED_MM says.
STEP_COLUMNS = 4
# llama-cpp-python 0.3.36's Llama(last_n_tokens_size=64): the repeat penalty's window.
PENALTY_LAST_N = 64


class CapacityError(ValueError):
    """A request the engine cannot hold (a prompt as long as the context)."""


@dataclass
class Request:
    """One generation: ``emit`` gets its tokens as they become safe to show, ``done`` its result
    (a ``Generation``, ``Cancelled`` or another exception), both on the engine's thread."""

    rid: int
    tokens: list[int]
    sampling: Sampling
    stops: Sequence[str]
    cancel: threading.Event
    emit: Callable[[list[Token]], None]
    done: Callable[[Generation | BaseException], None]
    forced: Sequence[int] | None = None  # decode these ids instead of sampling (a recorded turn again)
    session: int | None = None  # the run it belongs to: its sequence is kept for it (see Sessions)
    schema: str | None = None  # sample only what this JSON schema (its text) allows
    prefix: Sequence[int] | None = None  # these ids in place of the first ones sampled (an edit fork's kept text)


@dataclass
class _Run:
    """A request on its sequence: where its prompt is, its sampler and what it sampled."""

    request: Request
    sampler: Any
    decoder: PieceDecoder
    max_new: int
    out: Generation
    started: float
    prompt_done: float = 0.0
    placed: bool = False  # its sequence's cells were cut back to what it reuses (``_place``)
    canonical: bool = True  # its prompt is being evaluated from a canonical chunk boundary
    pending: int | None = None  # sampled, not yet evaluated: goes into the next decode step


@dataclass
class _Sequence:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # what its KV cells hold, positions 0..len-1
    canonical: int = 0  # leading tokens evaluated in the canonical layout (whole chunks)
    run: _Run | None = None
    last_used: float = 0.0
    owner: int | None = None  # the session whose cells these are, while it lasts


def round_up(n: int, group: int) -> int:
    """``n`` rounded up to a multiple of ``group``."""
    return -(-n // group) * group


def stream_count(n_seq: int, repack: bool | None = None) -> int:
    """KV streams of an engine with ``n_seq`` sequences: those, the store, and with repacked weights
    (by default when n_seq > 1) pads up to a multiple of REPACK_GROUP (every decode step is that
    wide, see Exactness)."""
    return round_up(n_seq + 1, REPACK_GROUP if (n_seq > 1 if repack is None else repack) else 1)


def kv_bytes_per_token(metadata: dict[str, str]) -> int | None:
    """Bytes of f16 KV cache (llama.cpp's default type) one token takes in one sequence, from the
    GGUF's metadata (``Llama.metadata``); None when the architecture's keys are not there."""
    arch = metadata.get("general.architecture", "")
    try:
        layers = int(metadata[f"{arch}.block_count"])
        heads = int(metadata[f"{arch}.attention.head_count"])
        kv_heads = int(metadata.get(f"{arch}.attention.head_count_kv", heads))
        head_dim = int(metadata[f"{arch}.embedding_length"]) // heads
        k = int(metadata.get(f"{arch}.attention.key_length", head_dim))
        v = int(metadata.get(f"{arch}.attention.value_length", head_dim))
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    return layers * kv_heads * (k + v) * 2


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if not n:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.intc) != np.asarray(b[:n], dtype=np.intc))
    return int(diff[0]) if diff.size else n


class BatchEngine:
    """The weights, one context with ``n_seq`` sequences, and the scheduler; see the module docstring.

    Not thread-safe: ``submit``, ``step`` and ``generate`` run on one thread (the worker's); only
    the requests' cancel events are set from elsewhere."""

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
        n_seq: int,
        repack: bool | None = None,
    ):
        lc = self._lc = import_llama_cpp()
        from llama_cpp import _internals  # the wrappers that free their native objects

        self._internals: Any = _internals

        self.n_seq = max(1, int(n_seq))
        self.n_ctx = int(n_ctx)
        self.chunk = max(1, int(prompt_chunk or CANONICAL_CHUNK))
        self.min_p = float(min_p)
        self.default_seed = RANDOM_SEED if seed is None else int(seed) & 0xFFFFFFFF
        self.repack = self.n_seq > 1 if repack is None else bool(repack)  # see Exactness
        self.group = REPACK_GROUP if self.repack else 1  # a decode step's width is a multiple of this
        streams = stream_count(self.n_seq, self.repack)  # the sequences, the store, pads
        self.kv_cells = self.n_ctx * streams
        model_params = lc.llama_model_default_params()
        model_params.use_extra_bufts = self.repack  # see Exactness
        self._model: Any = self._internals.LlamaModel(path_model=model_path, params=model_params, verbose=False)
        params = lc.llama_context_default_params()
        params.n_ctx = self.kv_cells
        # one chunk plus one token per sequence fits one ubatch, so a step is never split
        params.n_batch = params.n_ubatch = max(int(n_batch), self.chunk + streams)
        params.n_seq_max = streams
        params.kv_unified = False  # a stream per sequence: cell p holds position p (see Exactness)
        params.n_threads = params.n_threads_batch = int(n_threads)
        params.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as Llama(flash_attn=False) does
        self._ctx: Any = self._internals.LlamaContext(model=self._model, params=params, verbose=False)
        self._mem = self._ctx.memory
        self.vocab = Vocab(lc.Llama(model_path=model_path, vocab_only=True, n_ctx=8, verbose=False), lc)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.vocab.vocab))
        self._batch = lc.llama_batch_init(params.n_batch, 0, 1)
        self._lp_buf = np.empty(self.n_vocab, dtype=np.float32)
        # what decides the numbers (the engine fingerprint hashes it), the same for any n_seq (Exactness)
        self.describe = (
            f"batched (weights {'repacked, steps padded to ' + str(self.group) if self.repack else 'plain'}; "
            f"ubatches of at most {STEP_COLUMNS} columns)"
        )
        self.store = _Sequence(self.n_seq)
        self.sequences = [_Sequence(i) for i in range(self.n_seq)]
        # every stream by id: the sequences, the store, then pads (empty: they only fill decode steps)
        self._streams = [*self.sequences, self.store, *(_Sequence(i) for i in range(self.n_seq + 1, streams))]
        self._waiting: list[Request] = []
        self.steps = 0
        self.max_in_flight = 0
        self.stolen = 0  # requests that took a sequence a live session held (see Sessions)

    # -- requests -------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        return not self._waiting and all(s.run is None for s in self.sequences)

    def submit(self, request: Request) -> None:
        """Queue a request; it starts at a step when a sequence is free."""
        self._waiting.append(request)

    def generate(
        self,
        tokens: list[int],
        sampling: Sampling,
        stop: Sequence[str],
        cancel: threading.Event,
        emit: Callable[[list[Token]], None],
    ) -> Generation:
        """One request run to its end, as ``LlamaModel.generate`` (the worker's smoke check)."""
        result: list[Generation | BaseException] = []
        self.submit(Request(0, tokens, sampling, stop, cancel, emit, result.append))
        while not result:
            self.step()
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    def reset(self) -> None:
        """Forget the cells of the store and of every sequence not generating."""
        for s in [self.store, *self.sequences]:
            if s.run is None:
                self._lc.llama_memory_seq_rm(self._mem, s.seq_id, -1, -1)
                s.tokens, s.canonical = [], 0

    # -- one step -------------------------------------------------------------------------------

    def step(self) -> None:
        """Admit, evaluate one prompt chunk, decode one token for every generating sequence."""
        self.steps += 1
        for s in self.sequences:
            if s.run is not None and s.run.request.cancel.is_set():
                self._finish(s, Cancelled())
        self._admit()
        reading = [s for s in self.sequences if s.run is not None and s.run.pending is None]
        if reading:  # the one that has waited longest: admission order is last_used order
            first = min(reading, key=lambda s: s.last_used)
            self._guarded([first], lambda: self._prompt_chunk(first))
        generating = [s for s in self.sequences if s.run is not None and s.run.pending is not None]
        self.max_in_flight = max(self.max_in_flight, sum(s.run is not None for s in self.sequences))
        if generating:
            self._guarded(generating, lambda: self._decode(generating))

    def _guarded(self, sequences: list[_Sequence], work: Callable[[], None]) -> None:
        """Run ``work``; if it fails, the runs of ``sequences`` end with the error and their cells are
        forgotten (what they hold is unknown), the other sequences go on."""
        try:
            work()
        except Exception as e:  # noqa: BLE001 - those requests' error, reported to their callers
            for s in sequences:
                self._lc.llama_memory_seq_rm(self._mem, s.seq_id, -1, -1)
                s.tokens, s.canonical = [], 0
                if s.run is not None:
                    self._finish(s, e)

    def _admit(self) -> None:
        still: list[Request] = []
        for request in self._waiting:
            if request.cancel.is_set():
                request.done(Cancelled())
                continue
            free = [s for s in self.sequences if s.run is None]
            if not free:
                still.append(request)
                continue
            try:
                self._start(request, free)
            except Exception as e:  # noqa: BLE001 - this request's error, reported to its caller
                request.done(e)
        self._waiting = still

    def _start(self, request: Request, free: list[_Sequence]) -> None:
        tokens = request.tokens
        if not tokens:
            raise CapacityError("empty prompt: there is nothing to continue")
        if len(tokens) >= self.n_ctx:
            raise CapacityError(
                f"the prompt has {len(tokens)} tokens; each of the engine's {self.n_seq} "
                f"sequences holds at most {self.n_ctx}"
            )
        seq = self._choose(request, free)
        sampling = request.sampling
        seed = self.default_seed if sampling.seed is None else int(sampling.seed) & 0xFFFFFFFF
        max_new = int(sampling.max_tokens) if request.forced is None else len(request.forced)
        seq.run = _Run(
            request,
            self._sampler(sampling, seed, request.schema),
            PieceDecoder(request.stops),
            min(max_new, self.n_ctx - len(tokens)),
            Generation(prompt_tokens=len(tokens), layout="batched"),
            time.perf_counter(),
        )
        seq.last_used = time.perf_counter()

    def _choose(self, request: Request, free: list[_Sequence]) -> _Sequence:
        """The sequence for a request (see Sessions): its session's own; else a free one no live
        session holds, extending or reusing most, the lowest id first (steps stay narrow); else,
        with more live sessions than sequences, the one used longest ago (counted in ``stolen``)."""
        mine = [s for s in free if request.session is not None and s.owner == request.session]
        if mine:
            return mine[0]
        unheld = [s for s in free if s.owner is None]
        if unheld:

            def rank(s: _Sequence) -> tuple[bool, int, int]:
                keep, _, extends = self._reuse(s, request.tokens)
                return extends, keep, -s.seq_id

            seq = max(unheld, key=rank)
        else:
            seq = min(free, key=lambda s: s.last_used)
            self.stolen += 1
        if request.session is not None:
            self.end_session(request.session)  # a session holds one sequence
            seq.owner = request.session
        return seq

    def end_session(self, session: int) -> None:
        """The run is over: its sequence may go to another one (its cells stay, for prefix reuse)."""
        for s in self.sequences:
            if s.owner == session:
                s.owner = None

    def _place(self, seq: _Sequence, run: _Run) -> None:
        """Keep what ``seq`` (or the store) holds of the run's prompt, drop the rest. Done when the
        prompt's first chunk is due, not at admission: requests admitted together then find the
        system prompt that the first of them left in the store."""
        tokens = run.request.tokens
        keep, from_store, extends = self._reuse(seq, tokens)
        if extends:
            run.canonical = keep == seq.canonical
        else:
            if from_store:  # across streams only a whole stream can be copied: copy, then cut
                self._lc.llama_memory_seq_cp(self._mem, self.store.seq_id, seq.seq_id, -1, -1)
            self._lc.llama_memory_seq_rm(self._mem, seq.seq_id, keep, -1)
            seq.canonical = keep
        seq.tokens = tokens[:keep]
        run.out.prompt_evaluated = len(tokens) - keep
        run.placed = True

    def _reuse(self, seq: _Sequence, tokens: list[int]) -> tuple[int, bool, bool]:
        """(tokens kept, whether they come from the store, whether the prompt extends the sequence)."""
        common = _common(seq.tokens, tokens)
        if common == len(seq.tokens) and common < len(tokens) and seq.tokens:
            return common, False, True
        last_chunk = (len(tokens) - 1) // self.chunk * self.chunk
        own = min(seq.canonical, common // self.chunk * self.chunk, last_chunk)
        stored = min(self.store.canonical, _common(self.store.tokens, tokens) // self.chunk * self.chunk, last_chunk)
        return (stored, True, False) if stored > own else (own, False, False)

    def _sampler(self, sampling: Sampling, seed: int, schema: str | None = None) -> Any:
        """The chain ``Llama._init_sampler`` (0.3.36) builds for ``LlamaModel.generate``'s arguments
        (a JSON schema's grammar after the penalties, as there)."""
        chain = self._internals.LlamaSampler()
        chain.add_penalties(
            n_vocab=self.n_vocab,
            penalty_last_n=PENALTY_LAST_N,
            penalty_repeat=float(sampling.repeat_penalty),
            penalty_freq=0.0,
            penalty_present=0.0,
        )
        if schema is not None:
            chain.add_grammar(self._model, json_grammar(schema))
        temp = float(sampling.temperature)
        if temp <= 0:
            chain.add_greedy()
        else:
            chain.add_top_k(int(sampling.top_k))
            chain.add_typical(1.0, 1)
            chain.add_top_p(float(sampling.top_p), 1)
            chain.add_min_p(self.min_p, 1)
            chain.add_temp(temp)
            chain.add_dist(seed)
        return chain

    def _prompt_chunk(self, seq: _Sequence) -> None:
        """Evaluate the next chunk of ``seq``'s prompt (alone in its batch: the canonical shape);
        at the prompt's end, sample its first token."""
        run = seq.run
        assert run is not None
        if not run.placed:
            self._place(seq, run)
        tokens = run.request.tokens
        start = len(seq.tokens)
        end = min(len(tokens), (start // self.chunk + 1) * self.chunk)
        if start < end:
            self._fill(
                [(t, start + i, seq.seq_id, start + i == len(tokens) - 1) for i, t in enumerate(tokens[start:end])]
            )
            seq.tokens = tokens[:end]
            if run.canonical and end % self.chunk == 0:
                seq.canonical = end
        if end < len(tokens):
            return
        self._keep_in_store(seq)
        run.prompt_done = time.perf_counter()
        if run.max_new <= 0:
            self._finish(seq, run.out)
            return
        self._sample(seq, end - start - 1)

    def _keep_in_store(self, seq: _Sequence) -> None:
        """The store takes ``seq``'s canonical chunks when they reach past what it shares with them."""
        store = self.store
        if seq.canonical <= min(store.canonical, _common(store.tokens, seq.tokens)):
            return
        lc = self._lc
        lc.llama_memory_seq_cp(self._mem, seq.seq_id, store.seq_id, -1, -1)  # the whole stream, then cut
        lc.llama_memory_seq_rm(self._mem, store.seq_id, seq.canonical, -1)
        store.tokens = seq.tokens[: seq.canonical]
        store.canonical = seq.canonical

    def _decode(self, generating: list[_Sequence]) -> None:
        """The next token of every generating sequence (see Speed and Exactness): the step covers
        stream ids 0..width-1, in ubatches of at most ``STEP_COLUMNS`` consecutive streams; a stream
        that is not generating takes part with a filler token at its next position, whose cell is
        removed afterwards."""
        live = {s.seq_id: s for s in generating}
        streams = self._streams[: round_up(max(live) + 1, self.group)]
        for first in range(0, len(streams), STEP_COLUMNS):
            entries, fillers = [], []
            for stream in streams[first : first + STEP_COLUMNS]:
                s = live.get(stream.seq_id)
                if s is not None:
                    assert s.run is not None and s.run.pending is not None
                    entries.append((s.run.pending, len(s.tokens), s.seq_id, True))
                else:
                    entries.append((0, len(stream.tokens), stream.seq_id, self.repack))  # logits: see Exactness
                    fillers.append(stream)
            if len(fillers) == len(entries):
                continue  # no generating sequence among these streams
            self._fill(entries)
            for stream in fillers:
                self._lc.llama_memory_seq_rm(self._mem, stream.seq_id, len(stream.tokens), -1)
            for i, (_, _, seq_id, _) in enumerate(entries):  # sampled before the next ubatch replaces the logits
                s = live.get(seq_id)
                if s is not None:
                    assert s.run is not None and s.run.pending is not None
                    s.tokens.append(s.run.pending)
                    s.run.pending = None
                    self._sample(s, i)

    def _fill(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of (token, position, sequence, wants logits) entries."""
        b = self._batch
        for i, (tok, pos, seq_id, logits) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq_id
            b.logits[i] = logits
        b.n_tokens = len(entries)
        rc = self._lc.llama_decode(self._ctx.ctx, b)
        if rc == 1:
            raise CapacityError(
                f"the KV cache ({self.kv_cells} cells for {self.n_seq} sequences of "
                f"{self.n_ctx} tokens) has no room left for this step"
            )
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _sample(self, seq: _Sequence, idx: int) -> None:
        """Sample ``seq``'s next token from logits row ``idx`` and act on it (emit, stop, end)."""
        run = seq.run
        assert run is not None
        ids = run.out.token_ids
        forced = run.request.forced
        tok = int(run.sampler.sample(self._ctx, idx)) if forced is None else int(forced[len(ids)])
        prefix = run.request.prefix
        if prefix and len(ids) < len(prefix):  # sampled all the same: the sampler's state goes on as it did
            tok = int(prefix[len(ids)])
        ptr = self._lc.llama_get_logits_ith(self._ctx.ctx, idx)
        lp = logprob_of(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)), tok, self._lp_buf)
        ids.append(tok)
        reason = None
        if self.vocab.is_eog(tok):
            reason = "eos"
        else:
            ready = run.decoder.feed(self.vocab.piece(tok), lp)
            if ready:
                run.request.emit(ready)
            if run.decoder.stopped:
                reason = "stop"
            elif len(ids) >= run.max_new:
                reason = "length"
        if reason is None:
            run.pending = tok
            return
        run.out.reason = reason
        self._finish(seq, run.out)

    def _finish(self, seq: _Sequence, result: Generation | BaseException) -> None:
        run = seq.run
        assert run is not None
        seq.run = None
        seq.last_used = time.perf_counter()
        run.sampler.close()
        if isinstance(result, Generation):
            rest = run.decoder.flush()
            if rest:
                run.request.emit(rest)
            now = time.perf_counter()
            prompt_done = run.prompt_done or now
            result.seconds.update(prompt_eval_s=prompt_done - run.started, generate_s=now - prompt_done)
        run.request.done(result)

    def close(self) -> None:
        for s in self.sequences:
            if s.run is not None:
                self._finish(s, Cancelled())
        self._lc.llama_batch_free(self._batch)
        self.vocab.close()
        self._ctx.close()
        self._model.close()
