"""The API fuzzed from its own OpenAPI schema (Schemathesis, loaded from the application at
/api/schema/), in all four of Schemathesis' phases: every operation, as the owner of one
tenant, as a member and anonymously, with the schema's examples, its coverage cases
(boundaries, each kind of invalid value) and generated data that fits the schema and data
that does not; as the other roles (admin, viewer) with valid data; then the stateful phase,
as the owner and as a member: sequences of calls that follow the schema's links (inferred by
Schemathesis from the responses' ids and the routes that take them: a created project's id
into its PATCH, its secrets, its DELETE); then every object route with another tenant's
objects, as the owner and as a viewer.

Checked on every response: no 5xx, the status code, the content type and the body all as the
schema documents them, and data that breaks the schema rejected (4xx). Another tenant's object
is a 404 on every object route, for the most and the least privileged role (scoping is one
queryset per resource, whatever the role: tests/tenancy), and nothing of that tenant changes.

The tests run in pytest-django's `db` transaction (rolled back after each): `on_commit` work
(job dispatch, webhook delivery, model import) never fires, so fuzzed submits stay rows in the
database and never reach Slurm, Kubernetes or a worker.

Nothing is excluded: the schema documents no streaming or websocket operation (the live log
websocket, /ws/..., is not in it; the archive and download operations answer plain HTTP).

The cases run are counted and printed at the end of the module ("schemathesis: N cases").
`make test-quick` sets TORUS_FUZZ=quick: the same operations, roles and checks, with the
schema's examples and fewer generated cases (no coverage phase); `make test` runs it whole.
"""

import os
import re
import uuid
from collections import Counter

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.config._checks import (
    NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES,
    NegativeDataRejectionConfig,
)
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi import checks as openapi_checks

from apps.datasets.tasks import project_storage_ensure
from apps.registry.models import RegisteredModel
from apps.tenancy.models import Role
from config.wsgi import application
from tests.tenancy.test_route_walk import acme_objects, acme_state

QUICK = os.environ.get("TORUS_FUZZ") == "quick"  # make test-quick's depth
MAX_EXAMPLES = 2 if QUICK else 6  # per operation, in the fuzzing phase
ROLE_EXAMPLES = 1 if QUICK else 2  # per operation and lesser role, valid requests only
CROSS_TENANT_EXAMPLES = 1 if QUICK else 3
STATEFUL_SCENARIOS = 10 if QUICK else 60  # per role: sequences of linked calls
# boundaries and each kind of invalid value, per field: the most cases of all the phases
OWNER_PHASES = ["examples", "fuzzing"] if QUICK else ["examples", "coverage", "fuzzing"]
STATEFUL_STEPS = 8  # at most, per sequence

CASES: Counter = Counter()  # per phase and role: printed at the module's end


def loaded(*, modes: list, examples: int, phases: list, path_regex: str | None = None):
    """The application's schema, set to generate `examples` cases an operation in `phases`."""
    spec = from_the_application()
    if path_regex:
        spec = spec.include(path_regex=path_regex)
    spec.config.generation.update(
        modes=modes,
        max_examples=examples,
        deterministic=True,  # the same cases every run: a failure reproduces
        no_shrink=True,
        with_security_parameters=False,  # each role's token is sent, never a generated header
    )
    spec.config.phases.update(phases=phases)
    return spec


def from_the_application():
    """The schema at /api/schema/. Invalid data may also be refused with a 413: a body over
    TORUS_MAX_BODY_BYTES (a command of 1,001 arguments of 32 KiB) is refused before it is
    read, as every operation documents."""
    spec = schemathesis.openapi.from_wsgi("/api/schema/", application)
    spec.config.checks.negative_data_rejection = NegativeDataRejectionConfig.from_dict(
        {"expected-statuses": [*NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES, "413"]}
    )
    return spec


# examples: the schema's own; coverage: boundaries and each kind of invalid value, per field
schema = loaded(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    examples=MAX_EXAMPLES,
    phases=OWNER_PHASES,
)
# The owner may do everything, so its requests reach the deepest code; a member works in its
# projects only, so its requests reach every refusal a role meets: every phase, valid and
# invalid data, for both and for the anonymous caller. The other roles differ from those only
# in what they may do, which valid requests show: the schema's examples and a few generated.
role_schema = loaded(
    modes=[GenerationMode.POSITIVE], examples=ROLE_EXAMPLES, phases=["examples", "fuzzing"]
)
# Valid requests only, to the operations on one object: whatever the body, another tenant's
# object is a 404.
object_routes = loaded(
    modes=[GenerationMode.POSITIVE],
    examples=CROSS_TENANT_EXAMPLES,
    phases=["examples", "fuzzing"],
    path_regex=r"\{",
)

RESPONSE_CHECKS = [
    schemathesis.checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
]
CHECKS = [*RESPONSE_CHECKS, openapi_checks.negative_data_rejection]

HYPOTHESIS = settings(
    deadline=None,
    # one tenant (the fixtures) per operation and role, shared by its examples
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Platform infrastructure, not tenant data: every signed-in user reads it (docs/access.md).
GLOBAL_SEGMENTS = {"clusters", "nodes", "accelerator-types"}
# Values for the path parameters that are not the object's own key.
OTHER_PARAMS = {
    "number": 1,
    "path": "model.bin",
    "alias": "production",
    "key_id": uuid.uuid4(),
    "name": "HF_TOKEN",  # a project secret's
}


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """Schemathesis calls the WSGI application itself, which (unlike Django's test client)
    closes the database connection at each request's start and end: the test's transaction
    would be gone. As the test client does, those handlers are off while a test runs."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def path_values(path: str, objects: dict) -> dict:
    """The path parameters of `path` filled from `objects` (tests/tenancy/test_route_walk.py's
    one object per resource): `/api/v1/models/{id}/versions/{number}/` -> the model's id."""
    segment = path.split("/")[3]  # /api/v1/<segment>/...
    names = re.findall(r"{(\w+)}", path)
    if segment == "datasets" and "dataset_pk" in names:
        version = objects["dataset-version"]
        values = {"dataset_pk": version.dataset_id, "number": version.number}
    elif segment == "lineage":
        values = {"id": objects["dataset-version"].pk}
    elif segment.removesuffix("s") in objects:
        values = {"id": objects[segment.removesuffix("s")].pk}
    else:  # a resource acme_objects has none of (a purge): an id that names nothing
        values = {"id": uuid.uuid5(uuid.NAMESPACE_URL, path)}
    return {name: str(values.get(name, OTHER_PARAMS.get(name))) for name in names}


def bearer(token: str | None) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.fixture
def acme_world(acme, cluster):
    """acme with one object of every resource and its project's storage tree."""
    project_storage_ensure(str(acme.project.pk))
    objects = acme_objects(acme, cluster)
    # its version 1 was made as a row: the next one the API makes is 2
    RegisteredModel.objects.filter(pk=objects["model"].pk).update(last_number=1)
    return acme, objects


FULL_ROLES = [Role.OWNER, Role.MEMBER, None]  # None: anonymous
LESSER_ROLES = [Role.ADMIN, Role.VIEWER]


@pytest.fixture(params=FULL_ROLES, ids=lambda role: role or "anonymous")
def role(request):
    return request.param


@pytest.fixture(params=LESSER_ROLES)
def lesser_role(request):
    return request.param


@pytest.fixture(scope="module", autouse=True)
def _print_the_cases_run(request):
    """At the module's end: how many cases each phase and role ran (the issue's note)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not CASES:
        return
    detail = ", ".join(f"{key}: {count}" for key, count in sorted(CASES.items()))
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():  # shown whether the tests passed or not
        total = sum(count for key, count in CASES.items() if "following" not in key)
        reporter.write_line(f"\nschemathesis: {total} cases ({detail})")


@schema.parametrize()
@HYPOTHESIS
def test_every_operation_as_the_owner_a_member_and_anonymously(case, role, acme_world):
    call_as(case, role=role, acme_world=acme_world)


@role_schema.parametrize()
@HYPOTHESIS
def test_every_operation_as_each_other_role(case, lesser_role, acme_world):
    call_as(case, role=lesser_role, acme_world=acme_world)


def call_as(case, *, role: Role | None, acme_world) -> None:
    acme, objects = acme_world
    if case.path_parameters and not case.meta.is_negative_at(ParameterLocation.PATH):
        case.path_parameters = path_values(case.path, objects)  # acme's own, not random ids
    phase = case.meta.phase.name.value if case.meta else "examples"
    CASES[f"{phase} as {role or 'anonymous'}"] += 1
    case.call_and_validate(headers=bearer(acme.tokens.get(role)), checks=CHECKS)


# The stateful phase: Schemathesis' state machine over the schema's links (the ones it infers:
# an id a response returns, into the routes that take one), as the owner and as a member.
stateful = from_the_application()
stateful.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    deterministic=True,
    no_shrink=True,
    with_security_parameters=False,
)
STATEFUL_SETTINGS = settings(
    max_examples=STATEFUL_SCENARIOS,
    stateful_step_count=STATEFUL_STEPS,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.generate],  # no shrinking: a failure is reported as found
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("role", [Role.OWNER, Role.MEMBER])
def test_linked_calls_as_the_owner_and_a_member(role, acme_world):
    acme, _ = acme_world
    headers = bearer(acme.tokens[role])
    label = f"stateful as {role}"

    class Workflow(stateful.as_state_machine()):
        # Each sequence starts from the same rows (a savepoint, rolled back after it): what a
        # sequence draws depends on the answers, which Hypothesis needs to be the same when it
        # replays a prefix of an earlier sequence.
        def setup(self):
            self.savepoint = transaction.savepoint()

        def teardown(self):
            transaction.savepoint_rollback(self.savepoint)

        def step(self, input):
            CASES[label] += 1
            if input.transition is not None and input.applied_parameters:
                CASES[f"{label}, following a link"] += 1  # a value of an earlier answer
            return super().step(input)

        def get_call_kwargs(self, case):
            return {"headers": headers}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS)

    assert Workflow.bundles, "the schema's links give the state machine no transitions"
    Workflow.run(settings=STATEFUL_SETTINGS)


@pytest.fixture
def globex_objects(globex, cluster):
    return acme_objects(globex, cluster)


@pytest.fixture(params=[Role.OWNER, Role.VIEWER])  # the most and the least a role may do
def intruder(request, acme):
    return bearer(acme.tokens[request.param])


@object_routes.parametrize()
@HYPOTHESIS
def test_another_tenants_objects_are_404(case, intruder, globex, globex_objects):
    before = acme_state(globex)
    case.path_parameters = path_values(case.path, globex_objects)
    response = case.call_and_validate(headers=intruder, checks=RESPONSE_CHECKS)
    where = (case.method, case.formatted_path, response.text)
    if case.path.split("/")[3] in GLOBAL_SEGMENTS:
        assert response.status_code == 200, where
    elif response.status_code == 403:
        # refused on the role alone, before any lookup (a viewer's upload): allowed only when
        # an object that does not exist gets the very same answer, so nothing is told
        case.path_parameters = {
            name: str(uuid.uuid4()) if name in ("id", "dataset_pk") else value
            for name, value in case.path_parameters.items()
        }
        unknown = case.call(headers=intruder)
        assert (unknown.status_code, unknown.text) == (403, response.text), where
    else:
        assert response.status_code == 404, where
        assert response.json()["error"]["code"] == "not_found"
    assert acme_state(globex) == before
