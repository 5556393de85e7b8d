"""The model worker: one llama.cpp model in a process of its own, driven by ``LlamaCppBackend``.

A native crash, an abort (``GGML_ASSERT``) or an out-of-memory kill in llama.cpp then ends this
process only; the app sees the socket close, reads the exit signal and ends the run readably.
Started as ``python -m tuiagent.backends.llama_worker FD`` with one end of a socket pair; messages
are pickled tuples (``multiprocessing.connection`` framing), listed in docs/models.md ("The
worker"). Loading ends with the smoke check (one tiny generation); ``LlamaModel`` serves one
request at a time, ``BatchEngine`` (with ``n_seq``) up to ``n_seq``; a reader thread takes
cancels; the worker exits when the app's end of the socket closes, even after ``kill -9``.
"""

from __future__ import annotations

import faulthandler
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Any

from tuiagent.backends.llama_batch import BatchEngine, Request
from tuiagent.backends.llama_model import Cancelled, Generation, LlamaModel, system_info
from tuiagent.protocol import Sampling, Token

SMOKE_PROMPT = "1 + 1 ="


class Worker:
    def __init__(self, conn: Connection):
        self.conn = conn
        self._send_lock = threading.Lock()
        self.jobs: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.cancels: dict[int, threading.Event] = {}
        self.model: LlamaModel | BatchEngine | None = None

    @property
    def loaded(self) -> LlamaModel | BatchEngine:
        """The model; ``load`` succeeded before any request is served."""
        if self.model is None:
            raise RuntimeError("the model is not loaded")
        return self.model

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self.conn.send(message)

    def load(self, options: dict[str, Any]) -> bool:
        n_seq: int | None = options.pop("n_seq", None)
        try:
            self.model = model = BatchEngine(**options, n_seq=n_seq) if n_seq else LlamaModel(**options)
            started = time.perf_counter()
            tokens = model.vocab.tokenize(SMOKE_PROMPT, add_bos=True)
            model.generate(tokens, Sampling(temperature=0.0, max_tokens=1), [], threading.Event(), lambda _: None)
            model.reset()
        except Exception as e:  # noqa: BLE001 - reported to the app, which explains it
            self.send(("load_error", f"{type(e).__name__}: {e}"))
            return False
        self.send(
            (
                "ready",
                {
                    "pid": os.getpid(),
                    "n_ctx": model.n_ctx,
                    "system_info": system_info(),
                    "smoke_s": round(time.perf_counter() - started, 4),
                    "n_seq": n_seq,
                    "kv_cells": model.kv_cells if isinstance(model, BatchEngine) else model.n_ctx,
                    "engine": model.describe if isinstance(model, BatchEngine) else "single",
                },
            )
        )
        return True

    def read(self) -> None:
        """The reader thread: cancels at once, everything else in order for the main thread."""
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                os._exit(0)  # the app is gone: nobody will read what we would generate
            if message[0] == "cancel":
                event = self.cancels.get(message[1])
                if event is not None:
                    event.set()
                continue
            if message[0] == "generate":
                self.cancels[message[1]] = threading.Event()
            self.jobs.put(message)
            if message[0] == "close":
                return

    def serve(self) -> None:
        model = self.loaded
        if isinstance(model, BatchEngine):
            self.serve_batched(model)
            return
        while True:
            message = self.jobs.get()
            kind = message[0]
            if kind == "close":
                return
            if kind == "reset":
                model.reset()
            elif kind == "fresh":
                model.fresh()
            elif kind == "generate":
                rid, tokens, sampling, stops, forced, _session, schema, prefix = message[1:]  # one sequence
                self.generate(model, rid, tokens, sampling, stops, forced, schema, prefix)

    def serve_batched(self, engine: BatchEngine) -> None:
        """Messages between the engine's steps: wait for one only when nothing is in flight."""
        while True:
            try:
                message = self.jobs.get(block=engine.idle)
            except queue.Empty:
                engine.step()
                continue
            kind = message[0]
            if kind == "close":
                return
            if kind == "reset":
                engine.reset()
            elif kind == "end_session":
                engine.end_session(message[1])
            elif kind == "generate":
                rid, tokens, sampling, stops, forced, session, schema, prefix = message[1:]
                engine.submit(
                    Request(
                        rid,
                        tokens,
                        Sampling(**sampling),
                        stops,
                        self.cancels[rid],
                        self.emitter(rid),
                        self.finisher(rid),
                        forced,
                        session,
                        schema,
                        prefix,
                    )
                )

    def emitter(self, rid: int) -> Callable[[list[Token]], None]:
        return lambda out: self.send(("tokens", rid, [(t.text, t.logprob) for t in out]))

    def finisher(self, rid: int) -> Callable[[Generation | BaseException], None]:
        return lambda result: self.finish(rid, result)

    def generate(
        self,
        model: LlamaModel,
        rid: int,
        tokens: list[int],
        sampling: dict[str, Any],
        stops: list[str],
        forced: list[int] | None = None,
        schema: str | None = None,
        prefix: list[int] | None = None,
    ) -> None:
        cancel = self.cancels[rid]
        result: Generation | BaseException
        try:
            if cancel.is_set():
                raise Cancelled
            result = model.generate(
                tokens, Sampling(**sampling), stops, cancel, self.emitter(rid), forced, schema, prefix
            )
        except Exception as e:  # noqa: BLE001 - Cancelled, or raised again in the app
            result = e
        self.finish(rid, result)

    def finish(self, rid: int, result: Generation | BaseException) -> None:
        """The request's last message: its end, its cancel, or its error."""
        self.cancels.pop(rid, None)
        if isinstance(result, Cancelled):
            self.send(("end", rid, "cancelled", [], {}))
        elif isinstance(result, BaseException):
            self.send(("error", rid, type(result).__name__, str(result)))
        else:
            stats = {k: v for k, v in asdict(result).items() if k not in ("reason", "token_ids")}
            self.send(("end", rid, result.reason, result.token_ids, stats))


def main(argv: list[str]) -> int:
    faulthandler.enable()  # a native crash leaves the Python stack in our log (stderr)
    conn = Connection(int(argv[1]))
    kind, options = conn.recv()
    assert kind == "load", kind
    worker = Worker(conn)
    if not worker.load(options):
        return 1
    threading.Thread(target=worker.read, name="llama-worker-reader", daemon=True).start()
    worker.serve()
    worker.loaded.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
