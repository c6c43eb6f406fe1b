"""A model's shape from a GGUF file's header: the metadata (layers, heads, KV heads, head
dimension, context) and the tensors' types and sizes, without reading the weights.

A small reader of the format (github.com/ggml-org/ggml/blob/master/docs/gguf.md), so the
platform needs no `gguf` package: magic "GGUF", version, tensor count, key/value count, the
key/values, then one info per tensor (name, dimensions, ggml type, offset).
"""

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from apps.compute.model_config import ModelConfig

# ggml type id -> (elements per block, bytes per block): ggml's type traits (gguf-py's
# GGML_QUANT_SIZES; tests/serving/test_fit.py compares the two).
GGML_BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 36),  # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
    40: (64, 36),  # NVFP4
    41: (128, 18),  # Q1_0
    42: (64, 18),  # Q2_0
}
GGML_TYPE_NAMES = {0: "f32", 1: "f16", 8: "q8_0", 30: "bf16", 2: "q4_0", 12: "q4_k", 14: "q6_k"}

# metadata value types
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q"}
_SCALARS |= {11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_KEPT_ARRAY = 4096  # longer arrays (the tokenizer's 32000+ tokens) are kept as their length
MAX_STRING = 1 << 24
MAX_COUNT = 1 << 32


class GGUFError(ValueError):
    """Not a GGUF file, or one this reader cannot make sense of."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]
    ggml_type: int

    @property
    def elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        block, size = GGML_BLOCKS[self.ggml_type]
        return -(-self.elements // block) * size


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict  # key -> value; long arrays as {"array_length": n}
    tensors: list[GGUFTensor]


class _Reader:
    def __init__(self, stream: BinaryIO):
        self.stream = stream

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        data = self.stream.read(size)
        if len(data) != size:
            raise GGUFError("The file ends inside its header.")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        length = self.take("<Q")
        if length > MAX_STRING:
            raise GGUFError(f"A string of {length} bytes in the header.")
        data = self.stream.read(length)
        if len(data) != length:
            raise GGUFError("The file ends inside its header.")
        return data.decode("utf-8", errors="replace")

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.take("<I"), self.take("<Q")
            if count > MAX_COUNT:
                raise GGUFError(f"An array of {count} items in the header.")
            if count > MAX_KEPT_ARRAY:
                if item_type in _SCALARS:  # skip without decoding
                    self.stream.seek(count * struct.calcsize(_SCALARS[item_type]), 1)
                else:
                    for _ in range(count):
                        self.value(item_type)
                return {"array_length": count}
            return [self.value(item_type) for _ in range(count)]
        raise GGUFError(f"Unknown metadata value type {vtype}.")


def read_header(path: str | Path) -> GGUFHeader:
    """The metadata and tensor infos of the GGUF file at `path` (GGUFError when it is not one)."""
    with open(path, "rb") as stream:
        reader = _Reader(stream)
        if stream.read(4) != b"GGUF":
            raise GGUFError("Not a GGUF file (no GGUF magic).")
        version = reader.take("<I")
        if version not in (2, 3):
            raise GGUFError(f"GGUF version {version} is not supported (2 or 3).")
        n_tensors, n_kv = reader.take("<Q"), reader.take("<Q")
        if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
            raise GGUFError("Implausible tensor or key counts.")
        metadata = {}
        for _ in range(n_kv):
            key = reader.string()
            metadata[key] = reader.value(reader.take("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = reader.string()
            n_dims = reader.take("<I")
            if n_dims > 8:
                raise GGUFError(f"Tensor {name!r} has {n_dims} dimensions.")
            shape = tuple(reader.take("<Q") for _ in range(n_dims))
            ggml_type = reader.take("<I")
            reader.take("<Q")  # offset
            if ggml_type not in GGML_BLOCKS:
                raise GGUFError(f"Tensor {name!r} has an unknown ggml type {ggml_type}.")
            tensors.append(GGUFTensor(name=name, shape=shape, ggml_type=ggml_type))
    return GGUFHeader(version=version, metadata=metadata, tensors=tensors)


def _per_layer(value, layers: int) -> list[int]:
    if isinstance(value, list):
        if len(value) != layers:
            raise GGUFError(f"A per-layer value has {len(value)} entries for {layers} layers.")
        return [int(v) for v in value]
    return [int(value)] * layers


def config_from_gguf(path: str | Path) -> ModelConfig:
    """The model's shape as the engine will see it: from `<arch>.*` keys, and the weights'
    exact size (the sum of the tensors' bytes)."""
    header = read_header(path)
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError("No general.architecture in the metadata.")

    def key(name: str, default=None):
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise GGUFError(f"No {arch}.{name} in the metadata.")
        return value

    layers = int(key("block_count"))
    hidden = int(key("embedding_length"))
    heads = _per_layer(key("attention.head_count"), layers)
    kv_heads = _per_layer(
        key("attention.head_count_kv", meta.get(f"{arch}.attention.head_count")), layers
    )
    if layers < 1 or hidden < 1 or min(heads) < 1:
        raise GGUFError("Layers, embedding length and heads must be positive.")
    head_dim = hidden // max(heads)
    key_length = int(key("attention.key_length", head_dim))
    value_length = int(key("attention.value_length", key_length))
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = meta.get(f"{arch}.vocab_size")
    if vocab is None and tokens is not None:
        vocab = tokens["array_length"] if isinstance(tokens, dict) else len(tokens)
    ffn = meta.get(f"{arch}.feed_forward_length", 0)
    weight_types = sorted({t.ggml_type for t in header.tensors if len(t.shape) > 1})
    return ModelConfig(
        architecture=arch,
        layers=layers,
        hidden=hidden,
        heads=max(heads),
        kv_heads_per_layer=tuple(kv_heads),
        key_length=key_length,
        value_length=value_length,
        ffn=max(ffn) if isinstance(ffn, list) else int(ffn),
        vocab=int(vocab or 0),
        context_train=int(key("context_length", 0)),
        parameters=sum(t.elements for t in header.tensors),
        weights_bytes=sum(t.nbytes for t in header.tensors),
        weights_dtype="+".join(GGML_TYPE_NAMES.get(t, f"type{t}") for t in weight_types),
        source="gguf",
    )
