"""Training metrics: printed by the SDK, recognised by the shipper, served for charts."""

import io

import pytest
from django.urls import reverse

from apps.logs.metrics import parse_metric_line
from apps.logs.models import JobMetric
from apps.logs.shipper import ship_pass
from apps.tenancy.models import Role
from tests.logs.test_shipper import write
from torus import log_metrics

pytestmark = pytest.mark.django_db


def test_the_sdk_line_parses_back():
    out = io.StringIO()
    log_metrics(step=12, loss=0.25, throughput=812.5, file=out)
    assert out.getvalue() == "torus-metric step=12 loss=0.25 throughput=812.5\n"
    assert parse_metric_line(out.getvalue().strip()) == (12, {"loss": 0.25, "throughput": 812.5})
    for bad in [
        "torus-metric loss=1",
        "torus-metric step=x loss=1",
        "torus-metric step=1",
        "torus-metric step=1 loss=abc",
        "metric step=1 loss=1",
    ]:
        assert parse_metric_line(bad) is None, bad
    with pytest.raises(ValueError):
        log_metrics(step=1, **{"bad name": 1.0})


def test_metrics_are_stored_once_and_served_as_series(es, acme, attempt):
    out = io.StringIO()
    for step in range(1, 4):
        log_metrics(step=step, loss=1.0 / step, file=out)
    write(attempt, b"some output\n" + out.getvalue().encode())
    ship_pass()
    ship_pass()
    assert JobMetric.objects.filter(job=attempt.job).count() == 3
    url = reverse("job-output-metrics", kwargs={"pk": attempt.job.pk})
    series = acme.client(Role.VIEWER).get(url).json()["series"]
    assert [(p["step"], p["value"]) for p in series["loss"]] == [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]
    assert acme.client(Role.VIEWER).get(url, {"metric": "accuracy"}).json() == {"series": {}}
    assert acme.client(Role.VIEWER).get(url, {"since_step": "x"}).status_code == 400
