"""Log search parameters (validated field by field), a job's log chunk and metric queries, and
the response shapes (for OpenAPI)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.logs.search import INTERVAL_RE, LEVELS, MAX_CONTEXT, MAX_SIZE, STREAMS

MAX_INT = 2**31 - 1  # PostgreSQL's integer, bigint
MAX_BIGINT = 2**63 - 1


@extend_schema_field({"type": "string", "maxLength": 200})
class LevelsField(serializers.Field):
    """One level or several, comma-separated: `ERROR,CRITICAL`."""

    def to_internal_value(self, data):
        if len(str(data)) > 200:
            raise serializers.ValidationError("At most 200 characters.")
        levels = [part.strip().upper() for part in str(data).split(",") if part.strip()]
        unknown = [level for level in levels if level not in LEVELS]
        if unknown or not levels:
            raise serializers.ValidationError(
                f"Unknown level {', '.join(unknown) or repr(data)}; use {', '.join(LEVELS)}."
            )
        return levels

    def to_representation(self, value):
        return ",".join(value)


class LogSearchQuerySerializer(serializers.Serializer):
    q = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=1000,
        default="",
        help_text='Words to find in the message (simple query syntax: `"exact phrase"`, '
        "`a | b`, `-word`, `pref*`); all words must match. Empty: every line.",
    )
    project = serializers.UUIDField(required=False)
    job = serializers.UUIDField(required=False)
    attempt = serializers.UUIDField(required=False)
    stream = serializers.ChoiceField(choices=STREAMS, required=False)
    level = LevelsField(required=False, help_text=f"Comma-separated, any of {', '.join(LEVELS)}.")
    node = serializers.CharField(required=False, max_length=255)
    rank = serializers.IntegerField(required=False, min_value=0, max_value=2**31 - 1)
    since = serializers.DateTimeField(required=False, help_text="ISO 8601, inclusive.")
    until = serializers.DateTimeField(required=False, help_text="ISO 8601, inclusive.")
    size = serializers.IntegerField(required=False, min_value=1, max_value=MAX_SIZE, default=50)
    after = serializers.CharField(
        required=False, max_length=1000, help_text="The `next` token of the previous page."
    )
    histogram = serializers.BooleanField(
        required=False, default=False, help_text="Add counts of the matching lines over time."
    )
    interval = serializers.RegexField(
        INTERVAL_RE.pattern + "|^auto$",
        required=False,
        max_length=32,
        help_text="Histogram bucket width, e.g. `30s`, `1m`, `1h`, `1d` (units ms, s, m, h, d); "
        "default `auto`: about 60 buckets over the range.",
    )

    def validate(self, attrs):
        since, until = attrs.get("since"), attrs.get("until")
        if since and until and until < since:
            raise serializers.ValidationError({"until": ["Must not be before since."]})
        return attrs


class LogContextQuerySerializer(serializers.Serializer):
    id = serializers.CharField(max_length=200, help_text="A hit id: `attempt:stream:offset`.")
    before = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_CONTEXT, default=10
    )
    after = serializers.IntegerField(required=False, min_value=0, max_value=MAX_CONTEXT, default=10)


class LogLineSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="`attempt:stream:offset`; use it with /logs/context/.")
    project = serializers.UUIDField()
    job = serializers.UUIDField()
    attempt = serializers.UUIDField()
    attempt_number = serializers.IntegerField()
    stream = serializers.ChoiceField(choices=STREAMS)
    node = serializers.CharField(allow_null=True)
    rank = serializers.IntegerField(allow_null=True)
    offset = serializers.IntegerField(help_text="Byte offset of the line in the stream.")
    timestamp = serializers.DateTimeField()
    level = serializers.ChoiceField(choices=LEVELS, allow_null=True)
    message = serializers.CharField()
    truncated = serializers.BooleanField(help_text="The line was longer than the shipper keeps.")
    highlight = serializers.CharField(
        allow_null=True,
        help_text="The message, HTML-escaped, with matches in <mark>…</mark>; null without q.",
    )


class HistogramBucketSerializer(serializers.Serializer):
    time = serializers.DateTimeField(help_text="Start of the bucket.")
    count = serializers.IntegerField()


class LogSearchResultSerializer(serializers.Serializer):
    hits = LogLineSerializer(many=True)
    total = serializers.IntegerField(help_text="All matching lines, over every page.")
    next = serializers.CharField(
        allow_null=True, help_text="Pass as `after` for the next page; null on the last page."
    )
    histogram = HistogramBucketSerializer(
        many=True, required=False, help_text="With histogram=1 or an interval."
    )
    interval = serializers.CharField(
        required=False, allow_null=True, help_text="The histogram bucket width used."
    )
    took_ms = serializers.IntegerField()


class LogContextSerializer(serializers.Serializer):
    hit = LogLineSerializer()
    before = LogLineSerializer(many=True, help_text="Earlier lines of the stream, in order.")
    after = LogLineSerializer(many=True, help_text="Later lines of the stream, in order.")


class LogQuerySerializer(serializers.Serializer):
    attempt = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)
    stream = serializers.ChoiceField(choices=["stdout", "stderr"], default="stdout")
    offset = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=1024 * 1024, default=65536)


class LogChunkSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(allow_null=True)
    stream = serializers.CharField()
    offset = serializers.IntegerField()
    next_offset = serializers.IntegerField()
    data = serializers.CharField()
    complete = serializers.BooleanField(help_text="The attempt has ended and all was read.")


class MetricQuerySerializer(serializers.Serializer):
    metric = serializers.RegexField(r"^[A-Za-z0-9_./,-]{0,1000}$", required=False)
    since_step = serializers.IntegerField(
        required=False, min_value=-MAX_BIGINT, max_value=MAX_BIGINT
    )


class MetricPointSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    value = serializers.FloatField()
    timestamp = serializers.DateTimeField()
    attempt = serializers.IntegerField()


class MetricSeriesSerializer(serializers.Serializer):
    series = serializers.DictField(child=MetricPointSerializer(many=True))
