"""A stream the shipper cannot read is parked, counted and logged once, while every other
stream ships to the real Elasticsearch; once readable again it resumes from its stored
offset and no line is lost."""

import logging
import os
import shutil
import time

from apps.core.models import PassCounter, PassFailure
from apps.jobs.models import JobAttempt
from apps.logs import shipper
from apps.logs.models import LogCursor
from apps.logs.shipper import ship_pass
from tests.factories import make_running_attempt
from tests.logs.conftest import count


def _write(path: str, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def test_an_unreadable_stream_is_parked_while_the_others_ship(
    es, acme, globex, cluster, logs_dir, caplog, monkeypatch
):
    park = 3.0  # the passes below fit in it even on a loaded machine (0.5 s did not)
    monkeypatch.setattr(shipper, "PARK_SECONDS", park)
    bad = make_running_attempt(world=acme, cluster=cluster, directory=logs_dir, stem="bad-")
    good = make_running_attempt(world=globex, cluster=cluster, directory=logs_dir, stem="ok-")
    _write(bad.stdout_path, b"".join(b"before %d\n" % i for i in range(10)))
    assert ship_pass().documents == 10
    # the stream's file is replaced by a directory (as a job could do to its own output)
    kept = f"{bad.stdout_path}.kept"
    os.rename(bad.stdout_path, kept)
    _write(kept, b"".join(b"after %d\n" % i for i in range(5)))
    os.mkdir(bad.stdout_path)
    key = f"{bad.pk}:stdout"

    caplog.set_level(logging.WARNING, logger="apps.core.passes")
    _write(good.stdout_path, b"globex line\n")
    ship_pass()
    assert count(attempt=good) == 1  # the other tenant's line reached Elasticsearch
    failure = PassFailure.objects.get(pass_name="shipper", item_key=key)
    assert failure.count == 1 and "IsADirectoryError" in failure.error

    # parked: the passes right after do not try it again (no tight loop)
    for _ in range(5):
        ship_pass()
    assert PassFailure.objects.get(pk=failure.pk).count == 1
    _write(good.stdout_path, b"globex again\n")
    ship_pass()
    assert count(attempt=good) == 2
    time.sleep(park + 0.1)  # its park is over: tried once more, parked for twice as long
    ship_pass()
    assert PassFailure.objects.get(pk=failure.pk).count == 2
    assert PassCounter.objects.get(pass_name="shipper").failures == 2
    logged = [r for r in caplog.records if key in r.getMessage()]
    assert len(logged) == 1  # once, not once a try

    # readable again: resumes from its offset, every line once, the failure cleared
    os.rmdir(bad.stdout_path)
    shutil.move(kept, bad.stdout_path)
    JobAttempt.objects.filter(pk=bad.pk).update(state="SUCCEEDED")
    deadline = time.monotonic() + 2 * park + 10
    while PassFailure.objects.filter(pk=failure.pk).exists():
        assert time.monotonic() < deadline, "the stream stayed parked"
        ship_pass()
        time.sleep(0.2)
    assert count(attempt=bad) == 15
    assert count(attempt=bad, query="after 4") == 1
    assert LogCursor.objects.get(attempt=bad, stream="stdout").complete
