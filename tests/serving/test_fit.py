"""Fit before launch without the engine: the formulas, the GGUF reader against the gguf
package, model shapes from config.json, the decision and its reasons, POST /api/v1/fit/ and
the check at submit for training jobs. (test_engine.py compares with llama-server's report.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from apps.compute import fit
from apps.compute.model_config import ConfigError, config_from_dict
from apps.compute.models import AcceleratorType
from apps.jobs.models import Job
from apps.serving.gguf_config import GGML_BLOCKS, GGUFError, config_from_gguf, read_header
from apps.tenancy.models import Role
from tests.conftest import bearer_client

MAKE_MODEL = Path(__file__).resolve().parents[2] / "examples" / "serving" / "make_tiny_llama.py"
MiB, GiB = fit.MiB, fit.GiB

LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
}
LLAMA3_70B = {
    "model_type": "llama",
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 28672,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}
H100_MB = 81559


def make_model(out: Path, *args: str) -> Path:
    vocab = Path(settings.TORUS_LLAMA_VOCAB)
    assert vocab.is_file(), f"{vocab} missing: run `make engines` (make test does)"
    subprocess.run(
        [sys.executable, str(MAKE_MODEL), str(out), "--vocab", str(vocab), *args],
        check=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fit-models")
    return {
        "gqa": make_model(root / "gqa.gguf"),
        "q8": make_model(root / "q8.gguf", "--weights", "q8_0", "--layers", "2", "--ff", "704"),
    }


@pytest.fixture
def nvidia(db):
    memory = {"h100": H100_MB, "": H100_MB}
    kind, _ = AcceleratorType.objects.update_or_create(
        gres_name="gpu", defaults={"name": "nvidia-gpu", "memory_mb": memory}
    )
    return kind


# -- the formulas ---------------------------------------------------------------------------


def test_engine_cells_round_each_slot_up_to_256():
    assert fit.engine_cells(slots=4, context=2048) == 8192
    assert fit.engine_cells(slots=1, context=1000) == 1024
    assert fit.engine_cells(slots=3, context=300) == 3 * 512  # 900 -> 1024 / 3 = 341 -> 512
    assert fit.engine_cells(slots=2, context=1) == 512


def test_kv_cache_uses_kv_heads_not_hidden(models):
    gqa = config_from_gguf(models["gqa"])
    assert (gqa.heads, gqa.kv_heads, gqa.key_length, gqa.layers) == (4, 2, 64, 4)
    # 4 layers x 2 x 2 KV heads x 64 x 8192 tokens x 2 bytes = 16 MiB; the hidden-size
    # formula (layers x 2 x hidden x tokens x bytes) would say 32 MiB
    assert fit.kv_cache_bytes(model=gqa, cells=8192, kv_cache_type="f16") == 16 * MiB
    assert 4 * 2 * gqa.hidden * 8192 * 2 == 32 * MiB
    # q8_0: 34 bytes per 32 values
    assert fit.kv_cache_bytes(model=gqa, cells=8192, kv_cache_type="q8_0") == 16 * MiB * 34 // 64


def test_llama_70b_kv_cache_is_an_eighth_of_the_hidden_formula():
    model = config_from_dict(LLAMA3_70B)
    kv = fit.kv_cache_bytes(model=model, cells=8192, kv_cache_type="f16")
    assert kv == 80 * 2 * 8 * 128 * 8192 * 2 == 2.5 * GiB
    assert kv * 8 == 80 * 2 * 8192 * 8192 * 2  # heads / KV heads = 64 / 8


def test_parameters_from_config_json():
    assert config_from_dict(LLAMA2_7B).parameters == 6_738_415_616
    assert config_from_dict(LLAMA3_70B).parameters == 70_553_706_496
    assert config_from_dict(LLAMA2_7B).weights_bytes == 6_738_415_616 * 2
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}
    # GPT-2 small: 124 M with its 1024 position embeddings, which the estimate leaves out
    assert 123_000_000 < config_from_dict(gpt2).parameters < 124_500_000
    assert config_from_dict({**LLAMA2_7B, "num_parameters": 7_000_000_000}).parameters == 7e9


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"num_attention_heads": "32"}, "num_attention_heads"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"torch_dtype": "float12"}, "torch_dtype"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ],
)
def test_config_errors_name_the_key(change, key):
    config = {**LLAMA2_7B, **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        config_from_dict(config)
    assert caught.value.key == key


# -- the GGUF reader ------------------------------------------------------------------------


def test_block_sizes_match_the_engines_gguf_package():
    from gguf.constants import GGML_QUANT_SIZES

    assert {int(t): sizes for t, sizes in GGML_QUANT_SIZES.items()} == GGML_BLOCKS


def test_reader_agrees_with_the_gguf_package(models):
    import gguf

    for path in models.values():
        theirs = gguf.GGUFReader(path)
        ours = read_header(path)
        assert [(t.name, int(t.tensor_type), int(t.n_bytes)) for t in theirs.tensors] == [
            (t.name, t.ggml_type, t.nbytes) for t in ours.tensors
        ]
        assert set(ours.metadata) == {k for k in theirs.fields if not k.startswith("GGUF.")}
        assert ours.metadata["llama.block_count"] == theirs.fields["llama.block_count"].contents()
        assert ours.metadata["tokenizer.ggml.tokens"] == {"array_length": 32000}


def test_config_from_gguf(models):
    gqa = config_from_gguf(models["gqa"])
    assert gqa.parameters == 19_286_272 and gqa.weights_bytes == 38_577_152  # f16 + f32 norms
    assert (gqa.vocab, gqa.context_train, gqa.weights_dtype, gqa.ffn) == (32000, 2048, "f16", 688)
    q8 = config_from_gguf(models["q8"])
    assert q8.weights_dtype == "q8_0" and q8.layers == 2
    # every matrix in 34-byte blocks of 32, the norms (f32) whole
    norms = (2 * 2 + 1) * 256
    assert q8.weights_bytes == (q8.parameters - norms) // 32 * 34 + norms * 4


def test_not_a_gguf(tmp_path):
    junk = tmp_path / "model.gguf"
    junk.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(GGUFError, match="magic"):
        config_from_gguf(junk)
    junk.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01" * 8)  # ends inside the header
    with pytest.raises(GGUFError, match="ends"):
        config_from_gguf(junk)


def test_make_tiny_llama_is_deterministic(models, tmp_path):
    again = make_model(tmp_path / "again.gguf")
    assert again.read_bytes() == models["gqa"].read_bytes()


# -- the decision ---------------------------------------------------------------------------


def test_70b_needs_two_h100s_and_says_so(nvidia):
    model = config_from_dict(LLAMA3_70B)
    common = dict(
        model_config=model,
        accelerator="gpu",
        gpu_type="h100",
        memory_mb=1024,
        slots=8,
        context=8192,
        kv_cache_type="f16",
    )
    one = fit.check_deployment(gpus=1, **common)
    assert one.fits is False and one.tensor_parallel is None and one.needed_devices == 2
    assert "Does not fit on 1 x nvidia-gpu h100" in one.reason
    assert "It would fit on 2 of them." in one.reason
    four = fit.check_deployment(gpus=4, **common)
    assert four.fits is True and four.tensor_parallel == 2
    assert four.per_device_bytes <= H100_MB * MiB
    assert four.breakdown["kv_cache"] == 20 * GiB  # 8 slots x 8192 tokens
    # 8-bit KV: 34/32 bytes per value instead of 2
    q8 = fit.check_deployment(gpus=4, **{**common, "kv_cache_type": "q8_0"})
    assert q8.breakdown["kv_cache"] == 20 * GiB * 34 // 64


def test_unknown_device_memory_is_not_a_refusal(nvidia):
    report = fit.check_deployment(
        model_config=config_from_dict(LLAMA2_7B),
        accelerator="gpu",
        gpu_type="mi300x",
        gpus=1,
        memory_mb=1024,
        slots=1,
        context=4096,
        kv_cache_type="f16",
    )
    assert report.fits is None and "not recorded" in report.reason


def test_cpu_replica_is_judged_against_its_memory(models):
    tiny = config_from_gguf(models["gqa"])
    common = dict(model_config=tiny, accelerator="gpu", gpu_type=None, gpus=0, kv_cache_type="f16")
    assert fit.check_deployment(memory_mb=1024, slots=4, context=2048, **common).fits is True
    small = fit.check_deployment(memory_mb=64, slots=4, context=2048, **common)
    assert small.fits is False and small.reason.startswith("Does not fit in 64.0 MiB of host")


def test_training_counts_gradients_and_optimizer(nvidia):
    model = config_from_dict(LLAMA2_7B, dtype="bfloat16")
    report = fit.check_training(**{**_training_args(model), "gpus": 8})
    params = model.parameters
    assert report.breakdown["weights"] == report.breakdown["gradients"] == 2 * params
    assert report.breakdown["optimizer"] == 12 * params  # two fp32 moments + fp32 master
    assert report.fits is True and report.tensor_parallel == 2  # 16 B/param = 100 GiB
    alone = fit.check_training(**{**_training_args(model), "gpus": 1})
    assert alone.fits is False and alone.needed_devices == 2


def _training_args(model):
    return dict(
        model_config=model,
        accelerator="gpu",
        gpu_type="h100",
        gpus=1,
        memory_mb=1024,
        batch_size=1,
        sequence_length=4096,
        precision="bf16",
        optimizer="adamw",
        gradient_checkpointing=True,
    )


# -- POST /api/v1/fit/ ----------------------------------------------------------------------


def post_fit(client, **body):
    return client.post(reverse("fit"), body, format="json")


@pytest.mark.django_db
def test_fit_api_answers_with_the_report(acme, nvidia):
    client = acme.client(Role.VIEWER)
    response = post_fit(
        client, model_config=LLAMA3_70B, gpus=4, gpu_type="h100", slots=8, context=8192
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["fits"] is True and body["tensor_parallel"] == 2
    assert body["breakdown"]["kv_cache"] == 20 * GiB
    assert body["model"]["kv_heads"] == 8 and body["model"]["head_dim"] == 128
    q4 = post_fit(client, model_config=LLAMA3_70B, gpus=1, gpu_type="h100", weights_type="q4_0")
    assert q4.json()["fits"] is True  # 4.5 bits a weight: 37 GiB
    training = post_fit(
        client, model_config=LLAMA2_7B, workload="training", gpus=1, gpu_type="h100"
    )
    assert training.json()["fits"] is False and training.json()["needed_devices"] == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model_config": {**LLAMA2_7B, "hidden_size": -1}}, "model_config"),
        ({"model_config": "llama"}, "model_config"),
        ({"model_config": LLAMA2_7B, "kv_cache_type": "q4"}, "kv_cache_type"),
        ({"model_config": LLAMA2_7B, "slots": 0}, "slots"),
        ({"model_config": LLAMA2_7B, "accelerator": "npu"}, "accelerator"),
        ({"model_config": LLAMA2_7B, "gpu_type": "h100; rm"}, "gpu_type"),
        ({"model_config": LLAMA2_7B, "batch_size": 8}, "batch_size"),  # inference
        ({"model_config": LLAMA2_7B, "workload": "training", "slots": 2}, "slots"),
        ({"model_config": LLAMA2_7B, "optimizer": "lion", "workload": "training"}, "optimizer"),
        ({"model_config": LLAMA2_7B, "gpus": 1, "bogus": 1}, "bogus"),
        ({}, "model_config"),
    ],
)
def test_fit_api_400_names_the_field(acme, nvidia, body, field):
    response = post_fit(acme.client(Role.VIEWER), **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


@pytest.mark.django_db
def test_fit_api_names_the_config_key(acme, nvidia):
    config = {k: v for k, v in LLAMA2_7B.items() if k != "vocab_size"}
    response = post_fit(acme.client(Role.VIEWER), model_config=config)
    assert response.json()["error"]["fields"]["model_config"] == {"vocab_size": ["Required."]}


@pytest.mark.django_db
def test_fit_api_needs_a_signed_in_caller(nvidia):
    response = post_fit(bearer_client(None), model_config=LLAMA2_7B)
    assert response.status_code == 401


# -- training jobs refused at submit --------------------------------------------------------


def submit(world, **extra):
    body = {
        "project": str(world.project.id),
        "name": "finetune",
        "command": ["true"],
        "resources": {"gpus_per_node": 1},  # the test cluster's GPUs have no type
        **extra,
    }
    return world.client(Role.MEMBER).post(reverse("job-list"), body, format="json")


@pytest.mark.django_db
def test_training_job_refused_when_its_model_cannot_fit(acme, cluster, nvidia):
    response = submit(acme, model_config={"config": LLAMA3_70B})
    assert response.status_code == 400, response.content
    (reason,) = response.json()["error"]["fields"]["model_config"]
    assert reason.startswith("Does not fit on 1 x nvidia-gpu: needs")
    assert not Job.objects.filter(project=acme.project).exists()
    # a 7B model over 2 GPUs (2 nodes x 1; 16 bytes a parameter in all) fits: the job is taken
    ok = submit(
        acme,
        model_config={"config": LLAMA2_7B, "gradient_checkpointing": True},
        resources={"nodes": 2, "gpus_per_node": 1},
    )
    assert ok.status_code == 201, ok.content
    assert ok.json()["spec"]["model_config"]["optimizer"] == "adamw"


@pytest.mark.django_db
def test_model_config_is_for_training_jobs_and_validated(acme, cluster, nvidia):
    bad = submit(acme, model_config={"config": {**LLAMA2_7B, "num_attention_heads": 0}})
    assert bad.status_code == 400
    fields = bad.json()["error"]["fields"]["model_config"]
    assert fields == {"config": {"num_attention_heads": ["Must be between 1 and 1099511627776."]}}
    other = submit(acme, kind="inference", model_config={"config": LLAMA2_7B})
    assert other.status_code == 400
    assert "model_config" in other.json()["error"]["fields"]
    unknown = submit(acme, model_config={"config": LLAMA2_7B, "lr": 1e-4})
    assert unknown.json()["error"]["fields"]["model_config"] == {"lr": ["Unknown field."]}
    assert not Job.objects.filter(project=acme.project).exists()


# -- a registered GGUF version --------------------------------------------------------------


@pytest.mark.django_db
def test_fit_api_reads_a_registered_gguf(acme, globex, gguf_version):
    body = {"model": "tiny@production", "project": str(acme.project.id), "gpus": 0}
    response = post_fit(acme.client(Role.VIEWER), memory="1G", **body)
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["fits"] is True and report["model"]["source"] == "gguf"
    assert report["model"]["kv_heads"] == 2 and report["breakdown"]["weights"] == 38_577_152
    assert report["breakdown"]["kv_cache"] == 16 * MiB  # 4 slots x 2048 tokens by default
    small = post_fit(acme.client(Role.VIEWER), memory=64, **body).json()
    assert small["fits"] is False and "Does not fit in 64.0 MiB of host memory" in small["reason"]
    # another tenant's project is not found; a missing version is a 400 at model
    assert post_fit(globex.client(Role.OWNER), **body).status_code == 404
    missing = post_fit(acme.client(Role.VIEWER), **{**body, "model": "tiny:9"})
    assert missing.status_code == 400 and "model" in missing.json()["error"]["fields"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "tiny@production"}, "project"),
        ({"model": "tiny@production", "model_config": LLAMA2_7B}, "model_config"),
        ({"model": "no version", "project": "00000000-0000-0000-0000-000000000000"}, "model"),
        ({"model_config": LLAMA2_7B, "project": "00000000-0000-0000-0000-000000000000"}, "project"),
    ],
)
def test_fit_api_model_or_config(acme, nvidia, body, field):
    response = post_fit(acme.client(Role.VIEWER), **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


def test_make_tiny_llama_finds_the_vocab_beside_the_engine(tmp_path):
    """Copied into a shared root (make examples-venv), the generator needs no --vocab: the
    tokenizer is at <root>/engines/llama.cpp/models/, where make engines puts it."""
    root = tmp_path / "shared"
    (root / "examples" / "serving").mkdir(parents=True)
    (root / "engines" / "llama.cpp" / "models").mkdir(parents=True)
    script = root / "examples" / "serving" / "make_tiny_llama.py"
    script.write_bytes(MAKE_MODEL.read_bytes())
    vocab = Path(settings.TORUS_LLAMA_VOCAB)
    (root / "engines" / "llama.cpp" / "models" / vocab.name).symlink_to(vocab)
    env = {k: v for k, v in os.environ.items() if k != "TORUS_LLAMA_VOCAB"}
    out = tmp_path / "m.gguf"
    subprocess.run(
        [sys.executable, str(script), str(out), "--layers", "1"], env=env, check=True, timeout=300
    )
    assert config_from_gguf(out).vocab == 32000
    # elsewhere, without --vocab or TORUS_LLAMA_VOCAB, it says what to give
    alone = subprocess.run(
        [sys.executable, str(MAKE_MODEL), str(tmp_path / "x.gguf")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert alone.returncode == 2 and "give --vocab" in alone.stderr


@pytest.mark.django_db
def test_a_sweep_with_one_job_too_big_is_refused_whole(acme, cluster, nvidia):
    job = {
        "project": str(acme.project.id),
        "command": ["true"],
        "resources": {"gpus_per_node": 2},  # 7B: 16 bytes a parameter over two H100s
        "model_config": {"config": LLAMA2_7B, "batch_size": 1, "gradient_checkpointing": True},
    }
    too_big = {**job, "name": "big", "model_config": {"config": LLAMA3_70B}}
    response = acme.client(Role.MEMBER).post(
        reverse("job-batch"),
        {"jobs": [{**job, "name": "a"}, too_big, {**job, "name": "b"}]},
        format="json",
    )
    assert response.status_code == 400, response.content
    errors = response.json()["error"]["fields"]["jobs"]
    assert set(errors) == {"1"}, errors
    assert "Does not fit" in errors["1"]["model_config"][0]
    assert not Job.objects.filter(project=acme.project).exists()
    fitting = acme.client(Role.MEMBER).post(
        reverse("job-batch"),
        {"jobs": [{**job, "name": "a"}, {**job, "name": "b"}]},
        format="json",
    )
    assert fitting.status_code == 201, fitting.content
    assert Job.objects.filter(project=acme.project).count() == 2
