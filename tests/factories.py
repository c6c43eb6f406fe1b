"""factory_boy factories for tenancy objects."""

import factory
from django.contrib.auth import get_user_model

from apps.tenancy.models import Membership, Project, ProjectMember, Role, Tenant
from tests.lanes import SUFFIX  # a worker's own names on the shared services

PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}{SUFFIX}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"Tenant {n}")
    slug = factory.Sequence(lambda n: f"tenant-{n}{SUFFIX}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    tenant = factory.SubFactory(TenantFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"Project {n}")
    slug = factory.Sequence(lambda n: f"project-{n}{SUFFIX}")


class ProjectMemberFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ProjectMember

    project = factory.SubFactory(ProjectFactory)
    user = factory.SubFactory(UserFactory)


class ClusterFactory(factory.django.DjangoModelFactory):
    """A cluster known only to the database (for tests that never reach a backend)."""

    class Meta:
        model = "compute.Cluster"
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"cluster-{n}")
    is_default = True
    config = factory.LazyFunction(lambda: {"restd_url": "http://127.0.0.1:9"})

    @factory.post_generation
    def with_nodes(obj, create, extracted, **kwargs):
        from apps.compute.models import Node, Partition

        if not create or extracted is False:
            return
        names = ["n1", "n2"]
        Partition.objects.create(cluster=obj, name="gpu", is_default=True, node_names=names)
        for name in names:
            Node.objects.create(
                cluster=obj,
                name=name,
                cpus=8,
                memory_mb=16384,
                accelerators={"gpu": {"": 4}},
                partitions=["gpu"],
                state="IDLE",
            )


def make_job(*, project, user, state="PENDING", gpus_per_node=1, cluster=None, **spec_overrides):
    """A job row with a valid, normalised spec, without going through admission."""
    from apps.jobs.models import Job
    from apps.jobs.spec import JobSpecSerializer, normalise, totals

    data = {
        "project": str(project.id),
        "name": "job",
        "command": ["true"],
        "resources": {"gpus_per_node": gpus_per_node},
        **spec_overrides,
    }
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = normalise(dict(serializer.validated_data))
    return Job.objects.create(
        tenant=project.tenant,
        project=project,
        user=user,
        name=spec["name"],
        spec=spec,
        state=state,
        cluster=cluster,
        partition="gpu",
        priority=spec["priority"],
        labels=spec["labels"],
        **totals(spec),
    )


def make_running_attempt(*, world, cluster, directory, stem: str = "", state="RUNNING"):
    """A RUNNING job of the world's member and its first attempt, its logs in `directory`
    (`<stem>stdout.log`, `<stem>stderr.log`)."""
    from apps.jobs.models import JobAttempt
    from apps.tenancy.models import Role

    job = make_job(
        project=world.project, user=world.users[Role.MEMBER], state="RUNNING", cluster=cluster
    )
    return JobAttempt.objects.create(
        job=job,
        number=1,
        state=state,
        nodes=["n1"],
        stdout_path=str(directory / f"{stem}stdout.log"),
        stderr_path=str(directory / f"{stem}stderr.log"),
    )
