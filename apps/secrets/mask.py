"""Masking the values of an attempt's secrets in its output, as CI systems do: each value (and
each line of a multi-line value) the attempt received is replaced before a line reaches
Elasticsearch, a live viewer or the log API.

Limits: values shorter than MIN_MASKED characters are not masked (they would mask ordinary
text); a value the job transforms (encoded, reversed, split by the job itself) is not found.
"""

from collections import OrderedDict

from apps.secrets import crypto

MIN_MASKED = 4
MASK = "***"
_CACHE_SIZE = 1024


def uses_secrets(spec: dict) -> bool:
    """Whether a job's spec names any secret (no query: the shipper asks per attempt)."""
    if spec.get("secrets"):
        return True
    return any(isinstance(value, dict) for value in (spec.get("env") or {}).values())


class Masker:
    """The values to mask in one attempt's output, longest first."""

    def __init__(self, values: list[str]):
        found = set()
        for value in values:
            for part in [value, *value.splitlines()]:
                part = part.strip("\r")
                if len(part) >= MIN_MASKED:
                    found.add(part)
        self.values = sorted(found, key=len, reverse=True)
        self.raw = [value.encode() for value in self.values]
        self.longest = max((len(raw) for raw in self.raw), default=0)

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str, *, cut: bool = False) -> str:
        """`text` with every value replaced by ***. `cut`: the text was truncated (a line
        over the length limit, followed by the truncation note): a value's head at the cut is
        masked too."""
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        if cut:
            head, sep, note = text.rpartition(" …[truncated at ")
            if sep:
                text = self._tail(head) + sep + note
        return text

    def _tail(self, text: str) -> str:
        for value in self.values:
            for size in range(len(value) - 1, MIN_MASKED - 1, -1):
                if text.endswith(value[:size]):
                    return text[:-size] + MASK
        return text

    def window(self, data: bytes) -> bytes:
        """Bytes with each value overwritten by as many '*' (the offsets stay true: the log
        API hands out byte offsets)."""
        for raw in self.raw:
            if raw in data:
                data = data.replace(raw, b"*" * len(raw))
        return data


_maskers: OrderedDict = OrderedDict()


def masker_for(attempt) -> Masker | None:
    """The attempt's masker (None when its job uses no secret: no query then), cached per
    process for the attempt's life."""
    if not uses_secrets(attempt.job.spec or {}):
        return None
    key = attempt.pk
    if key in _maskers:
        _maskers.move_to_end(key)
        return _maskers[key]
    from apps.secrets.models import SecretUse

    values = []
    for ciphertext in SecretUse.objects.filter(attempt_id=key).values_list("ciphertext", flat=True):
        try:
            values.append(crypto.decrypt(ciphertext))
        except crypto.InvalidToken:
            continue
    masker = Masker(values) or None
    if values or attempt.backend_id:  # not dispatched yet: ask again later
        _maskers[key] = masker
        if len(_maskers) > _CACHE_SIZE:
            _maskers.popitem(last=False)
    return masker


def read_masked(read, *, offset: int, limit: int, masker: Masker | None) -> bytes | None:
    """`read(offset, limit)` of an attempt's output with its secrets masked: the window is
    widened by the longest value on both sides, so a value across the edges of the range
    asked for is still found."""
    if masker is None:
        return read(offset, limit)
    margin = max(masker.longest - 1, 0)
    start = max(offset - margin, 0)
    data = read(start, limit + (offset - start) + margin)
    if data is None:
        return None
    return masker.window(data)[offset - start : offset - start + limit]
