"""Output for people (aligned tables) and for scripts (--json)."""

from __future__ import annotations

import json


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value).replace("\n", " ")


def table(rows: list[dict], columns: list[str]) -> str:
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def emit(args, data, columns: list[str] | None = None) -> None:
    if args.json or columns is None:
        print(json.dumps(data, indent=2))
    else:
        print(table(data if isinstance(data, list) else [data], columns))
