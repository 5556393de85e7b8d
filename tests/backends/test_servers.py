"""ServerPool: several servers of one model (``base_urls``). Which server a run is pinned to, and a
server that fails taken out. The servers here are real OpenAIBackends on loopback ports nothing
listens on (a refused connection is what a dead server gives); tests/eval/test_servers.py runs an
eval on two live llama.cpp servers and kills one."""

from __future__ import annotations

import textwrap

import pytest

from tests.backends.llama_server import free_port
from tuiagent.backends.base import BackendCrashed, Failover, Sessions
from tuiagent.backends.openai import OpenAIBackend, create
from tuiagent.backends.servers import ServerPool, ServerSession
from tuiagent.config import load_models
from tuiagent.errors import ConfigError
from tuiagent.protocol import Sampling


def _dead_server() -> OpenAIBackend:
    return OpenAIBackend(
        model_id="m", base_url=f"http://127.0.0.1:{free_port()}/v1", served_model="m", max_retries=0, timeout=5
    )


async def test_runs_go_to_the_least_loaded_server_and_a_failed_one_is_taken_out():
    a, b = _dead_server(), _dead_server()
    pool = ServerPool([a, b])
    assert isinstance(pool, Sessions) and isinstance(pool, Failover)
    first, second, third = pool.session(), pool.session(), pool.session()
    assert [s.base_url for s in (first, second, third)] == [a.base_url, b.base_url, a.base_url]
    await third.aclose()
    await third.aclose()  # once only
    assert pool.open == {a.base_url: 1, b.base_url: 1}
    with pytest.raises(BackendCrashed, match=rf"{a.base_url} failed and is taken out .*1 of 2 still serving"):
        [t async for t in first.stream("hi", Sampling(max_tokens=1), [])]
    assert pool.serving() == 1 and a.base_url in pool.down
    assert pool.session().base_url == b.base_url  # a has fewer runs open, but is out
    with pytest.raises(BackendCrashed, match="was taken out"):  # a run pinned to a: its next turn fails at once
        [t async for t in first.stream("hi", Sampling(max_tokens=1), [])]
    with pytest.raises(BackendCrashed):
        [t async for t in second.stream("hi", Sampling(max_tokens=1), [])]
    assert pool.serving() == 0
    with pytest.raises(BackendCrashed, match="every server of model 'm' failed"):
        pool.session()
    await pool.aclose()


def _models(tmp_path, source: str):
    path = tmp_path / "models.toml"
    path.write_text(
        textwrap.dedent("""
        [models.pool]
        backend = "openai"
        [models.pool.source]
        kind = "server"
        """)
        + textwrap.dedent(source)
    )
    return load_models(path).get("pool")


async def test_base_urls_in_models_toml_make_a_pool(tmp_path):
    urls = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    spec = _models(tmp_path, f"base_urls = {urls!r}\n".replace("'", '"'))
    assert spec.source.servers == tuple(urls)
    pool = create(spec)
    assert isinstance(pool, ServerPool) and [s.base_url for s in pool.servers] == urls
    assert isinstance(pool.session(), ServerSession) and pool.determinism == "per-server"
    await pool.aclose()
    one = _models(tmp_path, f'base_url = "{urls[0]}"\n')
    assert one.source.servers == (urls[0],) and isinstance(create(one), OpenAIBackend)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("", "needs base_url or base_urls"),
        ('base_url = "http://a/v1"\nbase_urls = ["http://b/v1"]\n', "needs base_url or base_urls"),
        ('base_urls = ["http://a/v1", "http://a/v1"]\n', "lists a URL twice"),
        ("base_urls = []\n", "at least one"),
        ('base_urls = "http://a/v1"\n', "expected a list of strings"),
    ],
)
def test_bad_server_lists_are_clear_errors(tmp_path, source, message):
    with pytest.raises(ConfigError, match=message):
        _models(tmp_path, source)


async def test_a_judges_json_reply_goes_to_the_pools_pinned_server_and_fails_over_the_same_way():
    a, b = _dead_server(), _dead_server()
    pool = ServerPool([a, b])
    schema = {"type": "object"}
    with pytest.raises(BackendCrashed, match=rf"{a.base_url} failed and is taken out"):
        [t async for t in pool.stream_json("hi", Sampling(max_tokens=1), schema)]
    with pytest.raises(BackendCrashed, match=rf"{b.base_url} failed and is taken out"):  # pinned anew, to b
        [t async for t in pool.stream_json("hi", Sampling(max_tokens=1), schema)]
    await pool.aclose()
