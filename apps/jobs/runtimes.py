"""How long a job will run, predicted from similar past runs rather than its time limit.

Users set time limits far above what their jobs take (the trace's median job ends well within
a tenth of its limit), so a queue played forward on time limits says "hours" for minutes.
Instead: the recent ended attempts of the same user, project and job name; failing that, of
the same user and project; then of the project; then of everyone's (a system-wide spread
guesses better than a user's limit); at least MIN_RUNS each. A running job's remaining time
comes from those past runs that lasted longer than it has run so far, less what it has run (it
has outlived the short ones; one that outlived its own is looked up among everyone's). Never
past the time limit, where the cluster ends it.

Each job takes its run time at its own quantile of those runs (its `share`, fixed by its id),
not the median: forty jobs running at once end spread as forty runs were, the first of them
long before the median, and the queue behind them starts as they end.
"""

import bisect
import time
import zlib
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import CharField, F
from django.db.models.functions import Cast
from django.utils import timezone

from apps.jobs.models import AttemptState, JobAttempt

MIN_RUNS = 3
HISTORY_DAYS = 30
HISTORY_ROWS = 20_000  # the most recent ended attempts read, per pass at most
ENDED = (AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.TIMEOUT)

_cache: dict = {}  # "history" -> (read at, History)


@dataclass(frozen=True)
class Runs:
    seconds: list[float]  # sorted
    basis: str  # whose runs, in words


NONE = Runs([], "the time limit (no past runs to learn from)")


@dataclass
class History:
    by_name: dict  # (user id, project id as text, name) -> Runs
    by_user: dict  # (user id, project id) -> Runs
    by_project: dict  # project id -> Runs
    everyone: Runs = NONE  # every recent run: better than a limit, if worse than one's own

    def runs_for(self, job) -> Runs:
        """The past runs the prediction rests on (`everyone` when its own are too few)."""
        for runs in (
            self.by_name.get((job.user_id, job.project_id, job.name)),
            self.by_user.get((job.user_id, job.project_id)),
            self.by_project.get(job.project_id),
        ):
            if runs is not None:
                return runs
        return self.everyone


def history(*, now=None) -> History:
    """The recent ended attempts' durations by user, project and name (read once per
    TORUS_ESTIMATE_HISTORY_SECONDS per process: a pass every few seconds need not read it)."""
    read_at, cached = _cache.get("history", (0.0, None))
    if cached is not None and time.monotonic() - read_at < settings.TORUS_ESTIMATE_HISTORY_SECONDS:
        return cached
    now = now or timezone.now()
    rows = (
        JobAttempt.objects.filter(
            state__in=ENDED,
            started_at__isnull=False,
            ended_at__gte=now - timedelta(days=HISTORY_DAYS),
        )
        .order_by("-ended_at")
        .values_list("job__user_id", Cast("job__project_id", CharField()), "job__name")
        .annotate(seconds=F("ended_at") - F("started_at"))[:HISTORY_ROWS]
    )
    found, everyone = History(by_name={}, by_user={}, by_project={}), []
    for user_id, project_id, name, took in rows:  # (the id as text, as estimates' rows)
        seconds = max(took.total_seconds(), 1.0)
        everyone.append(seconds)
        found.by_name.setdefault((user_id, project_id, name), []).append(seconds)
        found.by_user.setdefault((user_id, project_id), []).append(seconds)
        found.by_project.setdefault(project_id, []).append(seconds)
    for table, words in (
        (found.by_name, "this job's name"),
        (found.by_user, "this user in this project"),
        (found.by_project, "this project"),
    ):
        for key, seconds in list(table.items()):
            if len(seconds) < MIN_RUNS:
                del table[key]
                continue
            seconds.sort()
            basis = f"{len(seconds)} past runs of {words}"
            table[key] = Runs(seconds, basis)
    if len(everyone) >= MIN_RUNS:
        everyone.sort()
        basis = f"{len(everyone)} recent runs of everyone's (none of this project's)"
        found.everyone = Runs(everyone, basis)
    _cache["history"] = (time.monotonic(), found)
    return found


def forget() -> None:
    """Drop the process's copy (tests that write attempts and read at once)."""
    _cache.clear()


def limit_seconds(job) -> float:
    minutes = ((job.spec or {}).get("resources") or {}).get("time_limit") or 60
    return float(minutes) * 60


def share(job_id: str) -> float:
    """Where in its past runs' spread a job's run time is taken, in (0, 1): fixed by its id
    (the same every pass) and spread evenly over many jobs."""
    return (zlib.crc32(job_id.encode()) % 1024 + 0.5) / 1024


def quantile(seconds: list[float], at: float) -> float:
    return seconds[min(int(at * len(seconds)), len(seconds) - 1)]


def run_seconds(seconds: list[float], limit: float, *, at: float) -> float:
    """The run time at quantile `at` of past runs `seconds` (sorted), within the limit."""
    return min(quantile(seconds, at), limit) if seconds else limit


def remaining_seconds(job, known: History, *, ran: float) -> float:
    """What a running job that has run `ran` seconds is predicted to run still."""
    left = max(limit_seconds(job) - ran, 0.0)
    for runs in (known.runs_for(job).seconds, known.everyone.seconds):  # its own, then all
        longer = runs[bisect.bisect_right(runs, ran) :]
        if longer:
            return min(max(quantile(longer, share(job.id)) - ran, 0.0), left)
    return left  # it has outlived every run known: the limit bounds it
