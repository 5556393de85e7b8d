"""``python -m llama_cpp.server`` on a free loopback port, for tests and benchmarks: started, waited
for until its /v1/models answers, and stopped (or killed, to play a server that dies).

One thread by default: llama.cpp's threads spin at barriers, and on a busy 2-core machine two of
them run several times slower than one. Always ``--interrupt_requests False``: by default the
server cuts a streaming completion short when another request arrives, and an eval sends several.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

UP_WITHIN_S = 60.0  # SmolLM2 loads in ~1 s; a loaded shared machine can take many times that
POLL_S = 0.2

LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy


class ServerFailed(RuntimeError):
    """The server exited, or did not answer in time; the message holds the end of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 2.0) -> bytes:
    with LOOPBACK.open(url, timeout=timeout) as r:
        return bytes(r.read())


class LlamaServer:
    """One server; ``with LlamaServer(model, log) as s:`` serves at ``s.base_url`` inside the block."""

    def __init__(self, model: Path, log: Path, *, n_ctx: int = 2048, threads: int = 1, extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.log = log
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--interrupt_requests",
            "False",
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> LlamaServer:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + UP_WITHIN_S
        while True:
            if self.proc.poll() is not None:
                raise ServerFailed(f"llama_cpp.server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                get(f"{self.base_url}/models")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerFailed(f"llama_cpp.server not up after {UP_WITHIN_S:g} s:\n{self.tail()}") from None
                time.sleep(POLL_S)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def kill(self) -> None:
        """Die at once (SIGKILL), as a crashed or unplugged server would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pool_entry(model_id: str, servers: list[LlamaServer], *, max_tokens: int = 256) -> str:
    """A models.toml entry naming every server in ``servers`` (``base_urls``), greedy."""
    return f"""
[models.{model_id}]
backend = "openai"
context_size = 2048
chat_template = "chatml"
[models.{model_id}.source]
kind = "server"
base_urls = {json.dumps([s.base_url for s in servers])}
served_model = "smollm2"
[models.{model_id}.sampling]
temperature = 0.0
max_tokens = {max_tokens}
[models.{model_id}.options]
timeout = 120
max_retries = 0
extra_body = {{ repeat_penalty = 1.0, min_p = 0.0 }}   # llama_cpp.server's own defaults otherwise
"""
