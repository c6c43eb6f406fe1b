"""The job state machine: illegal transitions cannot happen (a Hypothesis state machine)."""

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from apps.jobs.models import JobEvent
from apps.jobs.states import TERMINAL, TRANSITIONS, IllegalTransition, State
from apps.jobs.transitions import job_transition
from apps.tenancy.models import Role
from tests.conftest import make_world
from tests.factories import make_job

COUNTER = itertools.count()


class JobLifecycle(RuleBasedStateMachine):
    @initialize()
    def create(self):
        world = make_world(f"w{next(COUNTER)}")
        self.job = make_job(project=world.project, user=world.users[Role.MEMBER])
        JobEvent.objects.create(job=self.job, to_state=State.PENDING)
        self.model = State.PENDING

    @rule(to=st.sampled_from(list(State)))
    def attempt(self, to):
        legal = to in TRANSITIONS[self.model] or to == self.model
        try:
            job_transition(job=self.job, to=to, reason="hypothesis")
        except IllegalTransition:
            assert not legal, f"{self.model} -> {to} was refused"
        else:
            assert legal, f"{self.model} -> {to} was allowed"
            self.model = to

    @invariant()
    def database_agrees(self):
        if not hasattr(self, "job"):
            return
        self.job.refresh_from_db()
        assert self.job.state == self.model
        assert (self.job.finished_at is not None) == (self.model in TERMINAL)

    @invariant()
    def timeline_is_a_legal_chain(self):
        if not hasattr(self, "job"):
            return
        events = list(self.job.events.order_by("created_at", "id"))
        assert events[0].to_state == State.PENDING
        for before, after in itertools.pairwise(events):
            assert after.from_state == before.to_state
            assert State(after.to_state) in TRANSITIONS[State(after.from_state)]
        assert events[-1].to_state == self.model


@pytest.mark.django_db
def test_job_state_machine():
    JobLifecycle.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    JobLifecycle.TestCase().runTest()


def test_every_state_has_a_way_out_or_is_terminal():
    for state in State:
        assert TRANSITIONS[state], state
    assert all(TRANSITIONS[s] == {State.PENDING} for s in TERMINAL)
