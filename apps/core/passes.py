"""One bad item never stops a pass: how every periodic pass (dispatch, reconcile, the log
shipper's streams, serving's reconcile, webhook deliveries, the dataset cache's sweeps) handles
its items.

Each item runs by itself (`Pass.item`: a savepoint of its own, so a database error leaves no
failed transaction behind); one that raises an `Exception` (never KeyboardInterrupt or
SystemExit) is marked by the caller's `on_failure` (a job held with a reason, an attempt
failed, a stream parked), counted in a `PassFailure` row (open until the item next succeeds or
ends) and in the pass's `PassCounter` (a total that never goes down), and logged once: at its
first failure, and again only when its error text changes. Then the pass goes on.

Operators list the open rows with `manage.py torus_doctor`; `failure_totals()` is what a
metrics endpoint reads (failures counted by pass, items failing now by pass).
"""

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from apps.core import telemetry
from apps.core.models import PassCounter, PassFailure

logger = logging.getLogger(__name__)
ERROR_CHARS = 2000
KEY_CHARS = 255  # PassFailure.item_key


@dataclass(frozen=True)
class Open:
    """An open failure as a pass's process last read it."""

    count: int
    last_at: datetime
    error: str


def describe(error: BaseException | str) -> str:
    """An error's text for a reason a user reads: its message, after the kind of error when
    that is not one of ours ("KeyError: 'restart_policy'")."""
    if isinstance(error, str):
        return error[:ERROR_CHARS]
    text = str(error) or type(error).__name__
    if type(error).__module__.split(".")[0] != "apps":
        text = f"{type(error).__name__}: {text}"
    return text[:ERROR_CHARS]


class Pass:
    """The failures of one periodic pass's items. One instance per pass and process; the open
    failures are read once every `refresh_seconds` (a pass with none costs no query per item)."""

    def __init__(self, name: str, *, refresh_seconds: float = 5.0):
        self.name, self.refresh_seconds = name, refresh_seconds
        self._open: dict[str, Open] = {}
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------------

    def open(self, *, fresh: bool = False) -> dict[str, Open]:
        """{item key: Open} of this pass's open failures (re-read when stale or `fresh`)."""
        with self._lock:
            if fresh or time.monotonic() - self._read_at > self.refresh_seconds:
                rows = PassFailure.objects.filter(pass_name=self.name).values_list(
                    "item_key", "count", "last_at", "error"
                )
                self._open = {key: Open(count, at, error) for key, count, at, error in rows}
                self._read_at = time.monotonic()
            return dict(self._open)

    def parked(self, *, key: str, base_seconds: float, max_seconds: float) -> bool:
        """True while an item that failed `count` times in a row waits out its backoff
        (base_seconds doubled per failure, at most max_seconds) before its next try."""
        found = self.open().get(key[:KEY_CHARS])
        if found is None:
            return False
        wait = min(base_seconds * 2 ** min(found.count - 1, 30), max_seconds)
        return (timezone.now() - found.last_at).total_seconds() < wait

    # -- one item ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def item(
        self,
        key: str,
        *,
        on_failure: Callable[[BaseException], None] | None = None,
        atomic: bool = True,
    ) -> Iterator[None]:
        """Run one item's work: an Exception it raises is rolled back (`atomic`: a savepoint
        of its own), marked by `on_failure(error)`, counted and logged once, and swallowed;
        success clears an open failure of the item."""
        try:
            with transaction.atomic() if atomic else contextlib.nullcontext():
                yield
        except Exception as exc:  # (an item's failure; BaseException passes)
            self.failed(key=key, error=exc, on_failure=on_failure)
        else:
            self.succeeded(key=key)

    def failed(
        self,
        *,
        key: str,
        error: BaseException | str,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> int:
        """Record a failure of an item (marked first by `on_failure`, whose own failure is
        logged, not raised); its failures in a row."""
        key = key[:KEY_CHARS]
        if on_failure is not None:
            try:
                with transaction.atomic():
                    on_failure(error)
            except Exception:
                logger.exception("pass %s: %s could not be marked", self.name, key)
        text, now, changed = describe(error), timezone.now(), False
        with transaction.atomic():
            row = (
                PassFailure.objects.select_for_update()
                .filter(pass_name=self.name, item_key=key)
                .first()
            )
            if row is None:
                try:
                    with transaction.atomic():
                        row = PassFailure.objects.create(
                            pass_name=self.name,
                            item_key=key,
                            error=text,
                            count=1,
                            first_at=now,
                            last_at=now,
                        )
                    changed = True
                except IntegrityError:  # recorded meanwhile by another process
                    row = PassFailure.objects.select_for_update().get(
                        pass_name=self.name, item_key=key
                    )
            if row.last_at != now:
                changed = row.error != text
                row.count, row.error, row.last_at = row.count + 1, text, now
                row.save(update_fields=["count", "error", "last_at"])
            counted = PassCounter.objects.filter(pass_name=self.name).update(
                failures=F("failures") + 1
            )
            if not counted:
                try:
                    with transaction.atomic():
                        PassCounter.objects.create(pass_name=self.name, failures=1)
                except IntegrityError:
                    PassCounter.objects.filter(pass_name=self.name).update(
                        failures=F("failures") + 1
                    )
        with self._lock:
            self._open[key] = Open(row.count, row.last_at, row.error)
        if changed:  # the first failure, or a new error: once each
            logger.warning(
                "pass %s: %s failed (%d in a row): %s",
                self.name,
                key,
                row.count,
                text,
                exc_info=error if isinstance(error, BaseException) else None,
            )
        return row.count

    def succeeded(self, *, key: str) -> None:
        """The item went through: an open failure of it is cleared (no query when none)."""
        key = key[:KEY_CHARS]
        if key in self.open():
            self.forget(keys=[key])
            logger.info("pass %s: %s goes through again", self.name, key)

    def forget(self, *, keys) -> int:
        """Clear the open failures of items that went through or ended; how many."""
        keys = [key[:KEY_CHARS] for key in keys]
        if not keys:
            return 0
        deleted, _ = PassFailure.objects.filter(pass_name=self.name, item_key__in=keys).delete()
        with self._lock:
            for key in keys:
                self._open.pop(key, None)
        return deleted


def failures_open(*, pass_name: str | None = None) -> list[PassFailure]:
    """The open failures (of one pass, or all), oldest first within each pass."""
    rows = PassFailure.objects.all()
    if pass_name is not None:
        rows = rows.filter(pass_name=pass_name)
    return list(rows.order_by("pass_name", "first_at"))


def failure_totals() -> dict[str, dict[str, int]]:
    """{pass: {"failures": every failure counted (a counter), "failing": items failing now,
    "in_a_row": their failures in a row}}: /metrics shows torus_pass_item_failures_total and
    torus_pass_items_failing."""
    totals = {
        name: {"failures": failures, "failing": 0, "in_a_row": 0}
        for name, failures in PassCounter.objects.values_list("pass_name", "failures")
    }
    for row in PassFailure.objects.values("pass_name").annotate(n=Count("id"), c=Sum("count")):
        entry = totals.setdefault(row["pass_name"], {"failures": 0, "failing": 0, "in_a_row": 0})
        entry["failing"], entry["in_a_row"] = row["n"], row["c"]
    return totals


@telemetry.collector("passes")
def _collect():
    failures = CounterMetricFamily(
        "torus_pass_item_failures", "Failures of a pass's items, every one counted", labels=["pass"]
    )
    failing = GaugeMetricFamily("torus_pass_items_failing", "Items failing now", labels=["pass"])
    for name, entry in sorted(failure_totals().items()):
        failures.add_metric([name], entry["failures"])
        failing.add_metric([name], entry["failing"])
    yield failures
    yield failing
