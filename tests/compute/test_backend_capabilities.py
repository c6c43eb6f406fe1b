"""What each backend answers through its capabilities (apps/compute/backends/base.py Backend),
without reaching its cluster, and the platform's rules that ask them."""

import pytest
from rest_framework.exceptions import ValidationError

from apps.compute.backends import backend_class, reserved_env_prefixes, reserved_label_domains
from apps.compute.models import Backend, Cluster
from apps.jobs.spec_fields import RESERVED_ENV_PREFIXES, label_key_problem
from apps.serving.api.serializers import DeploymentCreateSerializer


def kind(backend: str, **config) -> type:
    return backend_class(Cluster(name="c", backend=backend, config=config))


def test_slurm_jobs_get_the_sites_slurm_conf_and_kubernetes_jobs_nothing():
    slurm = kind(Backend.SLURM)
    assert slurm.job_environment(config={"slurm_conf": "/etc/s.conf"}) == {
        "SLURM_CONF": "/etc/s.conf"
    }
    assert slurm.job_environment(config={}) == {}
    assert kind(Backend.KUBERNETES).job_environment(config={"slurm_conf": "/x"}) == {}


def test_what_each_backend_requires_and_offers():
    slurm, kube = kind(Backend.SLURM), kind(Backend.KUBERNETES)
    assert (slurm.requires_image, kube.requires_image) == (False, True)
    assert (slurm.dataset_node_cache, kube.dataset_node_cache) == (True, False)
    assert slurm.serving_problem(config={}) == ""
    assert "serving_image" in kube.serving_problem(config={})
    assert kube.serving_problem(config={"serving_image": "engine:1"}) == ""


def test_the_specs_reserved_names_are_the_platforms_and_every_backends():
    assert set(RESERVED_ENV_PREFIXES) == {"TORUS_", *reserved_env_prefixes()}
    assert {"SLURM_", "SBATCH_", "SRUN_", "SALLOC_"} <= set(reserved_env_prefixes())
    assert {"kubernetes.io", "k8s.io"} <= set(reserved_label_domains())
    assert label_key_problem("node.kubernetes.io/x") and label_key_problem("torus.io/x")
    assert label_key_problem("example.com/x") == ""


@pytest.mark.django_db
def test_a_deployment_on_a_cluster_without_a_serving_image_is_a_400_at_cluster():
    Cluster.objects.create(name="kube-noserve", backend=Backend.KUBERNETES, config={})
    with pytest.raises(ValidationError) as caught:
        DeploymentCreateSerializer().validate_cluster("kube-noserve")
    assert str(caught.value.detail[0]) == (
        "Cluster 'kube-noserve' has no serving image (config.serving_image): it runs no"
        " deployments."
    )
