"""Keys reach the field that has focus when each key's turn comes, not when the key arrived.

Textual hands a key to the focused widget's own queue the moment the app reads it. Keys that arrive in
one burst (a paste, tmux send-keys, fast typing on a busy machine) are therefore all handed to the
widget focused at arrival, even when an earlier key of the burst moves the focus (tab from the problem
to the gold field, ctrl+g to the guard panel): the gold answer lands in the problem box. Here the app
hands over one key (or paste) at a time and the next only once the widget has handled the last one
and the focus changes it asked for (``Widget.focus`` is itself a message to the app) have happened.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from textual import events
from textual.app import App
from textual.message_pump import MessagePump

_TYPED = (events.Key, events.Paste)
# A handler that keeps its widget busy this long (it awaits something) no longer holds the keys behind it. [ours]
STUCK_S = 2.0


class KeysInOrder(App[Any]):
    """An app whose keys and pastes go to the focused widget strictly one after another."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._typed_ahead: deque[events.Event] = deque()
        self._key_in_flight = 0.0  # when the key on its way was handed over (0: none)

    async def on_event(self, event: events.Event) -> None:
        if not isinstance(event, _TYPED) or event.is_forwarded:
            await super().on_event(event)
            return
        self._typed_ahead.append(event)
        if not self._key_in_flight or time.monotonic() - self._key_in_flight > STUCK_S:
            await self._next_key()

    async def _hand_over(self, event: events.Event) -> None:
        target = self.focused or self.screen
        self._key_in_flight = time.monotonic()
        try:
            await super().on_event(event)
        finally:
            self._after(target)

    def _after(self, node: MessagePump) -> None:
        """Follow the key up the path it bubbles along (each node's queue, in order); at the app,
        hand over the next key once the app's own queue, focus changes included, has caught up."""
        parent = node._parent
        if parent is None or not node.call_later(self._after, parent):
            self.call_later(self._next_key)

    async def _next_key(self) -> None:
        self._key_in_flight = 0.0
        if self._typed_ahead:
            await self._hand_over(self._typed_ahead.popleft())
