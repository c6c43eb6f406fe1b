"""Fit before launch: will a model fit the memory asked for, and over how many accelerators?

    weights      the tensors' bytes (exact from a GGUF; parameters x dtype bytes from a config)
    KV cache     layers x 2 x KV heads x head dim x tokens x bytes per element
                 (f16: 2; q8_0: 34/32, a block of 32 values is 32 bytes plus a 2-byte scale).
                 The hidden-size formula (layers x 2 x hidden x ...) over-counts a grouped-query
                 model by heads / KV heads. Tokens are what llama-server allocates: each of
                 `slots` sequences gets `context` cells rounded up to 256.
    activations  inference: the engine's compute buffer for a batch of 512 tokens (and the
                 attention mask over a slot's cells), and its output buffer; training: the
                 layers' saved activations (34 x seq x batch x hidden bytes per layer in
                 16-bit; 2 x ... with gradient checkpointing) and the logits
    training     also gradients (the weights' dtype) and the optimizer's state (AdamW: two
                 fp32 moments, plus fp32 master weights in mixed precision)
    overhead     a fixed per-device allowance (the CUDA context and allocator slack on a GPU,
                 the engine's own memory on a CPU)

Weights, KV cache, gradients, optimizer state and training activations are divided over the
tensor-parallel degree (the smallest power of two up to the accelerators asked for, dividing
the attention heads, at which one device's share fits); the compute buffer and the overhead
are counted whole on every device. docs/serving.md, "Fit before launch", has the figures
checked against the engine's own report.
"""

from dataclasses import asdict, dataclass, field

from apps.compute.model_config import DTYPE_BYTES, ModelConfig

MiB = 1024 * 1024
GiB = 1024 * MiB
KV_TYPES = {"f16": (1, 2), "q8_0": (32, 34), "f32": (1, 4)}  # (block, bytes per block)
KV_TYPE_NAMES = sorted(KV_TYPES)  # the API's choices (and the schema's enum)
UBATCH = 512  # llama-server's physical batch (-ub)
GPU_OVERHEAD = 512 * MiB
CPU_OVERHEAD = 64 * MiB
OPTIMIZERS = {"adamw": 8, "adam": 8, "sgd": 4, "none": 0}  # fp32 state bytes per parameter
PRECISIONS = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass
class FitReport:
    fits: bool | None  # None: the device memory is not known, nothing can be said
    reason: str
    workload: str  # "inference" or "training"
    devices: int  # accelerators asked for (0: CPU, the host memory asked for)
    device_name: str
    device_memory_bytes: int | None
    tensor_parallel: int | None  # the smallest degree that fits (None when none does)
    needed_devices: int | None  # when it does not fit: how many devices would do
    per_device_bytes: int  # at `tensor_parallel`, or at the largest degree tried
    breakdown: dict  # total bytes by part: weights, kv_cache, activations, ...
    tokens: int  # KV cells (inference) or tokens per step (training)
    model: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def engine_cells(*, slots: int, context: int) -> int:
    """KV cells llama-server allocates for `-np slots -c slots*context`: the total rounded up
    to 256, split per slot and each slot's share rounded up to 256 again."""
    total = -(-slots * context // 256) * 256
    per_slot = -(-(total // slots) // 256) * 256
    return per_slot * slots


def kv_cache_bytes(*, model: ModelConfig, cells: int, kv_cache_type: str) -> int:
    """K and V for `cells` tokens over all layers; a q8_0 row is whole 32-value blocks."""
    block, size = KV_TYPES[kv_cache_type]
    k_elements, v_elements = model.kv_elements_per_token()
    k_row = -(-k_elements // block) * size
    v_row = -(-v_elements // block) * size
    return (k_row + v_row) * cells


def inference_activation_bytes(*, model: ModelConfig, slots: int, cells: int) -> int:
    """The engine's compute buffer and its output buffer, an upper bound fitted to what
    llama-server reports (tests/serving/test_engine.py): a batch of up to UBATCH tokens
    through one layer in float32 (4 x hidden + 3 x feed-forward values a token), the
    attention mask over a slot's cells, logits for one token a slot (compute), and the
    output buffer's float32 logits for one token a slot."""
    tokens = min(UBATCH, cells)
    per_slot = cells // max(slots, 1)
    compute = 4 * tokens * (4 * model.hidden + 3 * model.ffn) + 4 * tokens * per_slot
    logits = 4 * model.vocab * min(tokens, slots)
    output = 4 * model.vocab * slots
    return compute + logits + output


def _degrees(*, limit: int, heads: int) -> list[int]:
    degrees, degree = [], 1
    while degree <= max(limit, 1):
        if heads % degree == 0:
            degrees.append(degree)
        degree *= 2
    return degrees


def _decide(
    *,
    workload: str,
    model: ModelConfig,
    sharded: dict,
    whole: dict,
    devices: int,
    device_name: str,
    device_memory: int | None,
    tokens: int,
) -> FitReport:
    """The smallest degree whose per-device share fits; else why not."""
    per_device_at = lambda degree: sum(sharded.values()) // degree + sum(whole.values())  # noqa: E731
    breakdown = {**sharded, **whole}
    common = dict(
        workload=workload,
        devices=devices,
        device_name=device_name,
        device_memory_bytes=device_memory,
        breakdown=breakdown,
        tokens=tokens,
        model=model.as_dict(),
    )
    parts = ", ".join(f"{name.replace('_', ' ')} {_gib(size)}" for name, size in breakdown.items())
    if device_memory is None:
        return FitReport(
            fits=None,
            reason=f"The memory of one {device_name} is not recorded, so the fit cannot be"
            f" judged. The estimate: {_gib(per_device_at(1))} ({parts}).",
            tensor_parallel=None,
            needed_devices=None,
            per_device_bytes=per_device_at(1),
            **common,
        )
    limit = max(devices, 1)
    degrees = _degrees(limit=limit, heads=model.heads)
    for degree in degrees:
        need = per_device_at(degree)
        if need <= device_memory:
            if devices:
                reason = (
                    f"Fits on {degree} x {device_name} (tensor-parallel degree {degree}):"
                    f" {_gib(need)} of {_gib(device_memory)} per device ({parts})."
                )
            else:
                reason = f"Fits in {_gib(device_memory)} of host memory: {_gib(need)} ({parts})."
            return FitReport(
                fits=True,
                reason=reason,
                tensor_parallel=degree,
                needed_devices=None,
                per_device_bytes=per_device_at(degree),
                **common,
            )
    largest = degrees[-1]
    needed = None
    if devices and sum(whole.values()) < device_memory:
        for degree in _degrees(limit=1024, heads=model.heads):
            if per_device_at(degree) <= device_memory:
                needed = degree
                break
    if devices:
        reason = (
            f"Does not fit on {devices} x {device_name}: needs {_gib(per_device_at(largest))}"
            f" per device at tensor-parallel degree {largest}, {_gib(device_memory)} available"
            f" ({parts})."
        )
    else:
        reason = (
            f"Does not fit in {_gib(device_memory)} of host memory: needs"
            f" {_gib(per_device_at(largest))} ({parts})."
        )
    if needed:
        reason += f" It would fit on {needed} of them."
    elif devices:
        reason += " No tensor-parallel degree that divides the attention heads makes it fit."
    else:
        reason += " Ask for more memory or for accelerators."
    return FitReport(
        fits=False,
        reason=reason,
        tensor_parallel=None,
        needed_devices=needed,
        per_device_bytes=per_device_at(largest),
        **common,
    )


def _gib(size: int) -> str:
    return f"{size / GiB:.2f} GiB" if size >= GiB else f"{size / MiB:.1f} MiB"


def estimate_deployment(
    *,
    model_config: ModelConfig,
    device_memory_bytes: int | None,
    device_name: str,
    gpus: int,
    slots: int,
    context: int,
    kv_cache_type: str,
) -> FitReport:
    """Serving with llama-server: weights + KV cache for `slots` x `context` tokens + compute
    buffer, on `gpus` accelerators of `device_memory_bytes` each, or (gpus 0) in the host
    memory asked for per replica (`device_memory_bytes` = memory_mb x MiB)."""
    if kv_cache_type not in KV_TYPES:
        raise ValueError(f"kv_cache_type: one of {', '.join(KV_TYPES)}")
    cells = engine_cells(slots=slots, context=context)
    sharded = {
        "weights": model_config.weights_bytes,
        "kv_cache": kv_cache_bytes(model=model_config, cells=cells, kv_cache_type=kv_cache_type),
    }
    whole = {
        "activations": inference_activation_bytes(model=model_config, slots=slots, cells=cells),
        "overhead": GPU_OVERHEAD if gpus else CPU_OVERHEAD,
    }
    return _decide(
        workload="inference",
        model=model_config,
        sharded=sharded,
        whole=whole,
        devices=gpus,
        device_name=device_name,
        device_memory=device_memory_bytes,
        tokens=cells,
    )


def estimate_training(
    *,
    model_config: ModelConfig,
    device_memory_bytes: int | None,
    device_name: str,
    gpus: int,
    batch_size: int,
    sequence_length: int,
    precision: str,
    optimizer: str,
    gradient_checkpointing: bool,
) -> FitReport:
    """Training: weights, gradients and optimizer state (sharded over the degree: tensor or
    pipeline parallel, or ZeRO-3/FSDP), and activations for `batch_size` sequences of
    `sequence_length` tokens per data-parallel rank."""
    dtype = PRECISIONS[precision]
    params = model_config.parameters
    width = DTYPE_BYTES[dtype]
    mixed = width < 4
    state = OPTIMIZERS[optimizer] + (4 if mixed and optimizer != "none" else 0)
    tokens = batch_size * sequence_length
    per_layer = (2 if gradient_checkpointing else 34) * tokens * model_config.hidden
    saved = model_config.layers * per_layer * width // 2
    if gradient_checkpointing:  # one layer's full set while it is recomputed
        saved += 34 * tokens * model_config.hidden * width // 2
    logits = tokens * model_config.vocab * (width + 4)  # the logits and their fp32 softmax
    sharded = {
        "weights": params * width,
        "gradients": params * width,
        "optimizer": params * state,
        "activations": saved + logits,
    }
    whole = {"overhead": GPU_OVERHEAD if gpus else CPU_OVERHEAD}
    return _decide(
        workload="training",
        model=model_config,
        sharded=sharded,
        whole=whole,
        devices=gpus,
        device_name=device_name,
        device_memory=device_memory_bytes,
        tokens=tokens,
    )


def device_memory(
    *, accelerator: str, gpu_type: str | None, gpus: int, memory_mb: int
) -> tuple[str, int | None]:
    """(what the memory is, its bytes per device): one accelerator of that GRES name and type
    as AcceleratorType.memory_mb records it (None when it does not), or with no accelerators
    the host memory asked for."""
    from apps.compute.models import AcceleratorType

    if not gpus:
        return "host memory", memory_mb * MiB
    kind = AcceleratorType.objects.filter(gres_name=accelerator).first()
    name = f"{kind.name if kind else accelerator}{f' {gpu_type}' if gpu_type else ''}"
    size = (kind.memory_mb or {}).get(gpu_type or "") if kind else None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        return name, None
    return name, size * MiB


def check_deployment(
    *,
    model_config: ModelConfig,
    accelerator: str,
    gpu_type: str | None,
    gpus: int,
    memory_mb: int,
    slots: int,
    context: int,
    kv_cache_type: str,
) -> FitReport:
    """One replica of a deployment: `gpus` accelerators (GRES name `accelerator`, type
    `gpu_type`) or, with none, `memory_mb` of host memory. apps/serving/gguf_config's
    config_from_gguf(path) gives the ModelConfig of a GGUF model version."""
    name, size = device_memory(
        accelerator=accelerator, gpu_type=gpu_type, gpus=gpus, memory_mb=memory_mb
    )
    return estimate_deployment(
        model_config=model_config,
        device_memory_bytes=size,
        device_name=name,
        gpus=gpus,
        slots=slots,
        context=context,
        kv_cache_type=kv_cache_type,
    )


def check_training(
    *,
    model_config: ModelConfig,
    accelerator: str,
    gpu_type: str | None,
    gpus: int,
    memory_mb: int,
    batch_size: int,
    sequence_length: int,
    precision: str,
    optimizer: str,
    gradient_checkpointing: bool,
) -> FitReport:
    """A training job on `gpus` accelerators in all (or, with none, `memory_mb` of host
    memory); model_config_from_dict(config, dtype=...) gives the ModelConfig of a config.json."""
    name, size = device_memory(
        accelerator=accelerator, gpu_type=gpu_type, gpus=gpus, memory_mb=memory_mb
    )
    return estimate_training(
        model_config=model_config,
        device_memory_bytes=size,
        device_name=name,
        gpus=gpus,
        batch_size=batch_size,
        sequence_length=sequence_length,
        precision=precision,
        optimizer=optimizer,
        gradient_checkpointing=gradient_checkpointing,
    )
