"""What the memory estimate needs to know about a model, from a GGUF header
(apps/serving/gguf_config.py) or a Hugging Face-style config dict (config.json)."""

from dataclasses import asdict, dataclass

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "int8": 1}
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "f16": "float16"}
DTYPE_ALIASES |= {"half": "float16", "bf16": "bfloat16", "fp8": "float8", "float": "float32"}
# architectures whose MLP has two matrices (up, down); the others are gated (gate, up, down)
UNGATED = {"gpt2", "gpt_neox", "gptj", "gpt_bigcode", "bloom", "opt", "falcon", "mpt", "phi"}
UNGATED |= {"bert", "roberta", "starcoder", "codegen", "gpt_neo"}
# the keys read, and the other names some families give them
ALIASES = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "seq_length"),
}
MAX_INT = 1 << 40


class ConfigError(ValueError):
    """A config value that is missing or wrong; `key` names it."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads_per_layer: tuple[int, ...]  # grouped-query attention: fewer than heads
    key_length: int  # per head (the head dimension)
    value_length: int
    ffn: int
    vocab: int
    context_train: int
    parameters: int
    weights_bytes: int  # as stored: exact from a GGUF, parameters x dtype bytes otherwise
    weights_dtype: str
    source: str  # "gguf" or "config"

    @property
    def kv_heads(self) -> int:
        return max(self.kv_heads_per_layer)

    def kv_elements_per_token(self) -> tuple[int, int]:
        """(K, V) elements one token keeps in the cache, over all layers."""
        heads = sum(self.kv_heads_per_layer)
        return heads * self.key_length, heads * self.value_length

    def as_dict(self) -> dict:
        data = asdict(self)
        data["kv_heads"] = self.kv_heads
        data["kv_heads_per_layer"] = list(self.kv_heads_per_layer)
        data["head_dim"] = self.key_length
        return data


def _int(config: dict, name: str, *, default=None, minimum: int = 1) -> int:
    for key in ALIASES.get(name, (name,)):
        if key in config and config[key] is not None:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(key, "Must be an integer.")
            if not minimum <= value <= MAX_INT:
                raise ConfigError(key, f"Must be between {minimum} and {MAX_INT}.")
            return value
    if default is None:
        raise ConfigError(name, "Required.")
    return default


def dtype_name(value, *, key: str = "torch_dtype") -> str:
    name = str(value).lower().removeprefix("torch.")
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ConfigError(key, f"One of {', '.join(sorted(DTYPE_BYTES))}.")
    return name


def estimate_parameters(
    *, hidden, layers, heads, kv_heads, head_dim, ffn, vocab, gated, tied, experts
) -> int:
    """Embeddings, attention (q, k, v, o), the MLP (per expert, plus a router), norms."""
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = (3 if gated else 2) * hidden * ffn * experts + (hidden * experts if experts > 1 else 0)
    per_layer = attention + mlp + 2 * hidden
    return vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden


def config_from_dict(config: dict, *, dtype: str | None = None) -> ModelConfig:
    """A Hugging Face-style config (what config.json holds: hidden_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
    torch_dtype, ...; GPT-2's n_embd/n_layer/n_head too). `num_parameters`, when given,
    replaces the count made from the shapes. ConfigError names a wrong key."""
    if not isinstance(config, dict):
        raise ConfigError("model_config", "Must be an object (a config.json).")
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    if config.get("multi_query") is True:
        kv_heads = 1
    else:
        kv_heads = _int(config, "num_key_value_heads", default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise ConfigError("num_key_value_heads", f"Must divide num_attention_heads ({heads}).")
    head_dim = _int(config, "head_dim", default=0, minimum=0) or hidden // heads
    if head_dim < 1:
        raise ConfigError("head_dim", "hidden_size / num_attention_heads is below 1.")
    ffn = _int(config, "intermediate_size", default=4 * hidden)
    vocab = _int(config, "vocab_size")
    experts = _int(config, "num_local_experts", default=0, minimum=0) or _int(
        config, "num_experts", default=1, minimum=1
    )
    model_type = str(config.get("model_type", "") or "").lower()
    tied = config.get("tie_word_embeddings", model_type in UNGATED)
    if not isinstance(tied, bool):
        raise ConfigError("tie_word_embeddings", "Must be true or false.")
    if dtype is None:
        dtype = dtype_name(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    parameters = _int(config, "num_parameters", default=0, minimum=0) or estimate_parameters(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=vocab,
        gated=model_type not in UNGATED,
        tied=tied,
        experts=experts,
    )
    return ModelConfig(
        architecture=model_type or "unknown",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads_per_layer=(kv_heads,) * layers,
        key_length=head_dim,
        value_length=head_dim,
        ffn=ffn,
        vocab=vocab,
        context_train=_int(config, "max_position_embeddings", default=0, minimum=0),
        parameters=parameters,
        weights_bytes=parameters * DTYPE_BYTES[dtype],
        weights_dtype=dtype,
        source="config",
    )
