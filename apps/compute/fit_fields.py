"""The fit's request fields, shared by POST /api/v1/fit/ and a training job's `model_config`."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.compute import fit
from apps.compute.model_config import ConfigError, config_from_dict
from apps.core import jsonsafe
from apps.core.api.serializers import StrictSerializer

MAX_CONFIG_KEYS = 500


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": True,
        "maxProperties": MAX_CONFIG_KEYS,
        "description": "A Hugging Face-style config.json: hidden_size, num_hidden_layers,"
        " num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,"
        " torch_dtype, ... (num_parameters overrides the count made from the shapes).",
    }
)
class HFConfigField(serializers.Field):
    """A config dict, checked by reading it (a wrong key is named: {"hidden_size": [...]})."""

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("Must be an object (a config.json).")
        if len(data) > MAX_CONFIG_KEYS:
            raise serializers.ValidationError(f"At most {MAX_CONFIG_KEYS} keys.")
        problem = jsonsafe.problem(data)  # it is stored with the job's spec
        if problem:
            raise serializers.ValidationError(problem)
        try:
            config_from_dict(data)
        except ConfigError as error:
            raise serializers.ValidationError({error.key: [error.message]}) from error
        return data

    def to_representation(self, value):
        return value


class TrainingShapeSerializer(StrictSerializer):
    """What a training step holds besides the model: per data-parallel rank."""

    batch_size = serializers.IntegerField(min_value=1, max_value=1 << 20, default=1)
    sequence_length = serializers.IntegerField(min_value=1, max_value=1 << 24, default=2048)
    precision = serializers.ChoiceField(choices=sorted(fit.PRECISIONS), default="bf16")
    optimizer = serializers.ChoiceField(choices=sorted(fit.OPTIMIZERS), default="adamw")
    gradient_checkpointing = serializers.BooleanField(default=False)


class TrainingFitSerializer(TrainingShapeSerializer):
    """A training job's `model_config`: the model's config and the step's shape; the job is
    refused at submit when it cannot fit the accelerators it asks for."""

    config = HFConfigField()
