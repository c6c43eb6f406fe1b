"""Changes to slurmdbd's associations, one at a time (apps/compute/backends/slurm.py): slurmdbd
22.05 numbered its association tree wrong when workers added and deleted accounts at once, then
crashed reading it."""

import fcntl
import threading

from apps.compute.backends import for_cluster
from tests.conftest import shared_name
from tests.jobs.conftest import slurm, slurm_cluster  # noqa: F401  (fixture)


def associations(account: str) -> list[str]:
    out = slurm(
        "sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}", "format=user"
    )
    return [user for user in out.split() if user]


def test_an_association_waits_for_a_change_under_way_and_is_made_after_it(slurm_cluster):  # noqa: F811
    backend = for_cluster(slurm_cluster)
    parent, account = shared_name("t-lockcheck"), shared_name("p-lockcheck")
    user = shared_name("lockcheck-user")
    done = threading.Event()

    def add():
        backend.ensure_association(user=user, account=account, parent=parent)
        done.set()

    try:
        with open(backend.slurm_conf, "rb") as conf:
            fcntl.flock(conf, fcntl.LOCK_EX)  # another process's change, under way
            adder = threading.Thread(target=add)
            adder.start()
            assert not done.wait(3)
            assert associations(account) == []
            fcntl.flock(conf, fcntl.LOCK_UN)
        adder.join(60)
        assert done.is_set()
        assert associations(account) == [user]
    finally:
        backend.account_remove(account=account)
        backend.account_remove(account=parent)
    assert associations(account) == []


def test_accounts_are_made_on_this_cluster_only(slurm_cluster):  # noqa: F811
    """One slurmdbd often serves several clusters: the tenant's and project's accounts and the
    user's association are made on the cluster's own (its slurm.conf's ClusterName), not on
    every cluster the database knows."""
    backend = for_cluster(slurm_cluster)
    other = shared_name("torus-other")
    parent, account = shared_name("t-onecluster"), shared_name("p-onecluster")
    user = shared_name("onecluster-user")
    slurm("sacctmgr", "-i", "add", "cluster", other)
    try:
        backend.ensure_association(user=user, account=account, parent=parent)
        clusters = slurm(
            "sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}",
            "format=cluster,user",
        ).split()  # fmt: skip
        assert sorted(set(clusters)) == ["torus|", f"torus|{user}"]  # the account, the user
    finally:
        backend.account_remove(account=account)
        backend.account_remove(account=parent)
        slurm("sacctmgr", "-i", "delete", "cluster", other, check=False)
