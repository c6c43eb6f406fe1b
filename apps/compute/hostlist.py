"""Slurm host lists: 'n[1-3,5],gpu07' <-> ['n1', 'n2', 'n3', 'n5', 'gpu07']."""

import re

_GROUP = re.compile(r"([^,\[]*)(\[[^\]]*\])?")


def expand(hostlist: str) -> list[str]:
    hosts: list[str] = []
    text = (hostlist or "").strip()
    position = 0
    while position < len(text):
        match = _GROUP.match(text, position)
        prefix, ranges = match.group(1), match.group(2)
        if ranges:
            for part in ranges[1:-1].split(","):
                if "-" in part:
                    low, high = part.split("-", 1)
                    width = len(low)
                    hosts += [f"{prefix}{n:0{width}d}" for n in range(int(low), int(high) + 1)]
                else:
                    hosts.append(f"{prefix}{part}")
        elif prefix:
            hosts.append(prefix)
        position = match.end()
        if position < len(text) and text[position] == ",":
            position += 1
        elif match.end() == match.start():
            break
    return hosts
