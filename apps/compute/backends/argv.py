"""A job's argv as the launchers read it (TORUS_ARGV): words separated by spaces, each byte
outside a safe set written as `\\0ooo`, the octal escape of bash's `printf %b`. The launcher
turns each word back with that builtin (no process per word, as base64 needed), and no word
holds a space, a quote, a glob character or a backslash of its own: nothing in it is ever
read as shell syntax. An empty word is `\\0` (a NUL: the empty string in bash)."""

import re

_UNSAFE = re.compile(rb"[^A-Za-z0-9_./:=@+,-]")


def encode(argv: list[str]) -> str:
    return " ".join(_word(arg) for arg in argv)


def _word(arg: str) -> str:
    if not arg:
        return "\\0"
    return _UNSAFE.sub(lambda m: b"\\0%03o" % m[0][0], arg.encode()).decode("ascii")
