"""TokenStream: a backend's stream carries its own stop reason (no shared ``last_stop_reason``),
so one backend can serve concurrent streams; closing or cancelling a stream says so."""

from __future__ import annotations

import asyncio

import pytest

from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.protocol import Sampling, Token, TokenStream

FENCE = "```output"


async def drain(stream: TokenStream) -> str:
    return "".join([t.text async for t in stream])


async def test_two_streams_in_flight_on_one_backend_each_get_their_own_stop_reason():
    backend = ScriptedBackend(
        [
            split_tokens("one two three four five six seven", -0.1),
            split_tokens("x = 1\n```output\n1\n", -0.1),
            split_tokens("the end", -0.1),
        ],
        delay_s=0.001,
    )
    capped = backend.stream("A", Sampling(max_tokens=3), [FENCE])
    fenced = backend.stream("B", Sampling(max_tokens=100), [FENCE])
    ended = backend.stream("C", Sampling(max_tokens=100), [FENCE])
    first = asyncio.create_task(drain(capped))
    await asyncio.sleep(0)  # the first has its turn before the others start
    texts = await asyncio.gather(first, drain(fenced), drain(ended))
    assert texts == ["one two three", "x = 1\n", "the end"]
    assert (capped.stop_reason, fenced.stop_reason, ended.stop_reason) == ("length", "stop", "eos")


async def test_closing_a_stream_early_cancels_it_and_runs_the_producers_cleanup():
    cleaned = []

    async def produce(stream):
        try:
            for i in range(100):
                yield Token(str(i))
            stream.stop_reason = "length"
        finally:
            cleaned.append(stream)

    stream = TokenStream(produce)
    assert stream.stop_reason is None
    async with stream:
        async for _token in stream:
            assert stream.stop_reason is None  # not yet ended
            break
    assert stream.stop_reason == "cancelled" and cleaned == [stream]
    assert [t async for t in stream] == []  # a closed stream yields nothing more
    await stream.aclose()  # closing again is harmless
    assert stream.stop_reason == "cancelled"


async def test_a_cancelled_consumer_leaves_the_stream_cancelled():
    backend = ScriptedBackend([split_tokens("a b c d e f g h", -0.1)], delay_s=0.05)
    stream = backend.stream("P", Sampling(max_tokens=100), [])
    seen = []

    async def consume():
        async for t in stream:
            seen.append(t)

    task = asyncio.create_task(consume())
    while not seen:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.stop_reason == "cancelled"


async def test_an_ended_stream_keeps_its_reason_when_closed():
    stream = ScriptedBackend([split_tokens("a b", None)]).stream("P", Sampling(), [])
    assert await drain(stream) == "a b" and stream.stop_reason == "eos"
    await stream.aclose()
    assert stream.stop_reason == "eos"


async def test_a_stream_that_raises_has_no_stop_reason():
    async def produce(stream):
        yield Token("a")
        stream.stop_reason = "eos"
        raise ConnectionError("the server went away")

    stream = TokenStream(produce)
    with pytest.raises(ConnectionError):
        await drain(stream)
    assert stream.stop_reason is None


async def test_a_producer_that_just_returns_ended_at_end_of_sequence():
    async def produce(stream, text):
        yield Token(text)

    stream = TokenStream(produce, "hi")
    assert await drain(stream) == "hi" and stream.stop_reason == "eos"
