"""The job lifecycle: states and the only transitions allowed between them."""

from django.db import models


class State(models.TextChoices):
    PENDING = "PENDING"  # waiting for admission (quotas); the reason says why
    QUEUED = "QUEUED"  # admitted; the dispatcher will submit it
    SUBMITTED = "SUBMITTED"  # the backend accepted it; waiting for resources there
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"  # an attempt failed retryably; a new one follows
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED, State.TIMEOUT})
# States that hold quota: admitted and not finished.
ACTIVE = frozenset({State.QUEUED, State.SUBMITTED, State.RUNNING, State.RESTARTING})

TRANSITIONS: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.QUEUED, State.CANCELLED, State.FAILED}),
    State.QUEUED: frozenset({State.SUBMITTED, State.CANCELLED, State.FAILED, State.RESTARTING}),
    State.SUBMITTED: frozenset(
        {
            State.RUNNING,
            State.SUCCEEDED,
            State.FAILED,
            State.CANCELLED,
            State.TIMEOUT,
            State.RESTARTING,
        }
    ),
    State.RUNNING: frozenset(
        {State.SUCCEEDED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.RESTARTING}
    ),
    State.RESTARTING: frozenset({State.QUEUED, State.CANCELLED, State.FAILED}),
    # A finished job can be restarted by its owner: it goes back through admission.
    State.SUCCEEDED: frozenset({State.PENDING}),
    State.FAILED: frozenset({State.PENDING}),
    State.CANCELLED: frozenset({State.PENDING}),
    State.TIMEOUT: frozenset({State.PENDING}),
}


class IllegalTransition(Exception):
    def __init__(self, current: str, target: str):
        super().__init__(f"a job cannot go from {current} to {target}")
        self.current, self.target = current, target


def check_transition(current: str, target: str) -> None:
    if State(target) not in TRANSITIONS[State(current)]:
        raise IllegalTransition(current, target)
