"""Turning one cell's IOPub messages into ``Output`` objects."""

from __future__ import annotations

import base64
import binascii
import itertools
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kernels.base import Output

TRUNCATED_NOTE = "Output truncated: {} more characters were not shown."
# Display data by which the kernel's own output cap (kernels.limits) reports what it cut.
DROPPED_MIME = "application/vnd.tuiagent.dropped+json"

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Ours: an error's traceback kept per cell (its head and tail); a 30 MB exception message was seen.
ERROR_LIMIT_CHARS = 20_000

# Preferred first when a message carries several image types.
_IMAGE_TYPES = {"image/png": ".png", "image/jpeg": ".jpg", "image/svg+xml": ".svg"}


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def clean(text: object) -> str:
    """Text from the kernel as the app keeps it: a string, ANSI colours gone, lone surrogates as U+FFFD
    (they cannot be written as UTF-8, so one would stop the trajectory)."""
    text = text if isinstance(text, str) else str(text)
    return _LONE_SURROGATE.sub("\ufffd", strip_ansi(text))


def _cap_error(text: str) -> str:
    if len(text) <= ERROR_LIMIT_CHARS:
        return text
    half = ERROR_LIMIT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters of the error not shown ...]\n{text[-half:]}"


# Per cell: images kept, and bytes per image (ours: a plot is tens of kB; eight 50 MB images were seen).
MAX_IMAGES = 16
MAX_IMAGE_BYTES = 8 * 1024 * 1024
IMAGES_DROPPED_NOTE = "{} image(s) were not kept: at most {} per cell, of at most {} MB each."


class ImageSaver:
    """Writes display images to ``directory`` (the app's, never one the kernel can write) under names
    unique to this saver, so kernels may share a directory.

    Each file is created new (O_EXCL) and never through a link (O_NOFOLLOW): a name planted in the
    directory makes the save fail rather than write somewhere else with the app's rights.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._prefix = f"image-{secrets.token_hex(3)}"
        self._numbers = itertools.count(1)

    def save(self, mime: str, data: str) -> Path | None:
        """``data`` as the message carries it: base64 for bitmaps, text for SVG. None when it is not
        valid, too big, or its name is taken."""
        try:
            raw = data.encode("utf-8", "replace") if mime == "image/svg+xml" else base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError, TypeError, AttributeError):
            return None
        if len(raw) > MAX_IMAGE_BYTES:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self._prefix}-{next(self._numbers)}{_IMAGE_TYPES[mime]}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError:  # a name taken (a planted link included) or no room: the image is not kept
            return None
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        return path


@dataclass
class _OpenStream:
    """Chunks of one stream that arrived one after another: one Output once the cell ends."""

    kind: Literal["stdout", "stderr"]
    chunks: list[str]


class OutputCollector:
    """Gathers a cell's outputs in arrival order.

    Consecutive chunks of one stream merge into one Output. Text beyond
    ``limit_chars`` (streams, results, display text) is dropped and counted,
    so a cell printing in a loop cannot exhaust the app's memory; errors are
    always kept.
    """

    def __init__(self, images: ImageSaver, limit_chars: int) -> None:
        self._images = images
        self._room = limit_chars
        self._dropped = 0
        self._images_dropped = 0
        self._images_kept = 0
        self._items: list[Output | _OpenStream] = []
        self.error_name: str | None = None

    def add(self, msg_type: str, content: dict[str, Any]) -> None:
        if msg_type == "stream":
            self._add_stream(content["name"], content["text"])
        elif msg_type == "error":
            self.error_name = clean(content["ename"])[:200]
            text = "\n".join(map(clean, content["traceback"])) or f"{self.error_name}: {clean(content['evalue'])}"
            self._items.append(Output("error", _cap_error(text)))
        elif msg_type in ("execute_result", "display_data", "update_display_data"):
            if DROPPED_MIME in content["data"]:
                self._dropped += int(content["data"][DROPPED_MIME])
            else:
                self._add_data(msg_type, content["data"])

    def outputs(self) -> tuple[Output, ...]:
        return tuple(
            Output(item.kind, clean("".join(item.chunks))) if isinstance(item, _OpenStream) else item
            for item in self._items
        )

    def notes(self) -> tuple[str, ...]:
        notes = []
        if self._dropped:
            notes.append(TRUNCATED_NOTE.format(self._dropped))
        if self._images_dropped:
            notes.append(IMAGES_DROPPED_NOTE.format(self._images_dropped, MAX_IMAGES, MAX_IMAGE_BYTES >> 20))
        return tuple(notes)

    def _fit(self, text: str) -> str:
        kept = text[: max(self._room, 0)]
        self._room -= len(kept)
        self._dropped += len(text) - len(kept)
        return kept

    def _add_stream(self, name: Literal["stdout", "stderr"], text: str) -> None:
        text = self._fit(text)
        if not text:
            return
        last = self._items[-1] if self._items else None
        if isinstance(last, _OpenStream) and last.kind == name:
            last.chunks.append(text)
        else:
            self._items.append(_OpenStream(name, [text]))

    def _add_data(self, msg_type: str, data: dict[str, Any]) -> None:
        text = self._fit(clean(data.get("text/plain", "")))
        mime = next((m for m in _IMAGE_TYPES if m in data), None)
        path = None
        if mime is not None and self._images_kept < MAX_IMAGES:
            path = self._images.save(mime, data[mime])
        if mime is not None and path is None:
            self._images_dropped += 1
        if path is not None:
            self._images_kept += 1
            self._items.append(Output("display", text, path=str(path), mime=mime))
        elif text:
            self._items.append(Output("result" if msg_type == "execute_result" else "display", text))
