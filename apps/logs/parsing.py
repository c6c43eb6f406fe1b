"""Turning raw output bytes into log events: lines, Python tracebacks as one event, long
lines truncated, timestamps and levels where present, any bytes decoded."""

import re
from dataclasses import dataclass
from datetime import datetime

TIMESTAMP = re.compile(
    rb"^\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
)
LEVEL = re.compile(rb"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
LEVELS = {b"WARN": "WARNING", b"FATAL": "CRITICAL"}
TRACEBACK = b"Traceback (most recent call last):"


@dataclass
class Event:
    offset: int  # byte offset of the event's first line in the file
    end: int  # byte offset just past it
    text: str
    timestamp: datetime | None
    level: str | None
    truncated: bool


def _stamp(line: bytes) -> datetime | None:
    match = TIMESTAMP.match(line)
    if not match:
        return None
    text = match.group(1).decode().replace(",", ".").replace(" ", "T").replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _level(line: bytes) -> str | None:
    match = LEVEL.search(line[:200])
    if not match:
        return None
    word = match.group(1)
    return LEVELS.get(word, word.decode())


def _continues_traceback(line: bytes) -> bool:
    return line[:1] in (b" ", b"\t") or line.startswith(b"During handling") or line == b""


def events(data: bytes, base: int, *, final: bool, max_line: int) -> tuple[list[Event], int]:
    """Complete events in `data` (which starts at file offset `base`) and the offset up to
    which they were consumed. Without `final`, a trailing partial line or an unfinished
    traceback is left for the next read."""
    lines: list[tuple[int, bytes]] = []
    position = 0
    while True:
        newline = data.find(b"\n", position)
        if newline < 0:
            if final and position < len(data):
                lines.append((position, data[position:]))
                position = len(data)
            break
        lines.append((position, data[position:newline]))
        position = newline + 1
    out: list[Event] = []
    consumed = 0
    i = 0
    while i < len(lines):
        start, line = lines[i]
        j = i + 1
        if line.rstrip(b"\r").endswith(TRACEBACK):
            while j < len(lines) and _continues_traceback(lines[j][1]):
                j += 1
            if j == len(lines) and not final:
                break  # the exception line has not been written yet
            j = min(j + 1, len(lines))  # the "ValueError: ..." line closes it
        end = lines[j][0] if j < len(lines) else position
        raw = b"\n".join(text for _, text in lines[i:j])
        truncated = len(raw) > max_line
        if truncated:
            raw = raw[:max_line]
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if truncated:
            text += f" …[truncated at {max_line} bytes]"
        out.append(Event(base + start, base + end, text, _stamp(line), _level(line), truncated))
        consumed = end
        i = j
    return out, base + consumed
