"""Django settings for Torus, read from the environment (config/env.py; docs/operations.md)."""

import os
from hashlib import sha256
from pathlib import Path

from config.env import (
    env_bool,
    env_database,
    env_int,
    env_list,
    env_range,
    env_str,
    use_services_env,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("TORUS_VAR_DIR", str(BASE_DIR / ".var")))
# Connection settings with the services' generated passwords (platform/services writes it):
# every variable below that the environment does not set is read from there first.
use_services_env(
    os.environ.get("TORUS_SERVICES_ENV", str(VAR_DIR / "secrets" / "services.env")),
    explicit="TORUS_SERVICES_ENV" in os.environ,
)

DEBUG = env_bool("TORUS_DEBUG", False)
SECRET_KEY = env_str("TORUS_SECRET_KEY", "insecure-dev-key-change-me" if DEBUG else None)
ALLOWED_HOSTS = env_list("TORUS_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list(
    "TORUS_CSRF_TRUSTED_ORIGINS", ["http://127.0.0.1:8000", "http://localhost:8000"]
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "apps.core",
    "apps.tenancy",
    "apps.compute",
    "apps.quotas",
    "apps.jobs",
    "apps.logs",
    "apps.identity",
    "apps.datasets",
    "apps.registry",
    "apps.serving",
    "apps.secrets",
    "apps.lifecycle",
    "apps.notifications",
]

MIDDLEWARE = [
    "apps.core.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env_database("TORUS_DATABASE_URL", "postgres://torus:torus@127.0.0.1:15432/torus")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: one server, separate logical databases for Celery, the cache and Channels.
REDIS_URL = env_str("TORUS_REDIS_URL", "redis://127.0.0.1:16379").rstrip("/")
REDIS_DB_BASE = env_int("TORUS_REDIS_DB_BASE", 0, minimum=0)

CACHES = {
    "default": {
        # Django's RedisCache with one connection pool per process (apps/core/cache.py)
        "BACKEND": "apps.core.cache.SharedPoolRedisCache",
        "LOCATION": f"{REDIS_URL}/{REDIS_DB_BASE + 1}",
        "KEY_PREFIX": "torus",
    }
}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [f"{REDIS_URL}/{REDIS_DB_BASE + 2}"], "prefix": "torus"},
    }
}

CELERY_BROKER_URL = f"{REDIS_URL}/{REDIS_DB_BASE}"
CELERY_RESULT_BACKEND = f"{REDIS_URL}/{REDIS_DB_BASE}"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE: dict = {}  # filled in below, once the intervals are read
# Every beat sends only while it holds a lease in Redis (apps/core/beat.py), so a second beat
# stands by and takes over within TORUS_BEAT_LEASE_SECONDS when the active one dies.
CELERY_BEAT_SCHEDULER = "apps.core.beat:LeasedScheduler"
TORUS_BEAT_LEASE_SECONDS = env_int("TORUS_BEAT_LEASE_SECONDS", 15, minimum=1)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
# The built browser UI (config/ui.py, `make ui`): under /static/ui/, compressed; Vite's hashed
# assets (name-<8 chars>.js) cached for good. The wheel does not carry the build: an installed
# server points TORUS_UI_DIST at one (docs/operations.md), else / says the UI is not built.
UI_DIST = Path(env_str("TORUS_UI_DIST", str(BASE_DIR / "frontend" / "dist")))
STATICFILES_DIRS = [("ui", UI_DIST)] if UI_DIST.is_dir() else []
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_IMMUTABLE_FILE_TEST = r"^/static/ui/assets/.+-[A-Za-z0-9_-]{8}\.\w+$"

SESSION_COOKIE_HTTPONLY = True
# TORUS_TLS: served only over HTTPS behind a proxy that ends TLS and sets X-Forwarded-Proto
# (scripts/web-proxy; scripts/portal sets it with TORUS_SCALE > 1): secure cookies, HSTS, plain
# HTTP redirected (not the probes: the proxy's health checks and orchestrators call them).
TORUS_TLS = env_bool("TORUS_TLS", False)
SESSION_COOKIE_SECURE = env_bool("TORUS_SECURE_COOKIES", TORUS_TLS)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
if TORUS_TLS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SECURE_HSTS_SECONDS = env_int("TORUS_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("TORUS_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("TORUS_HSTS_PRELOAD", True)

# Requests with a larger body are refused with 413 before any view reads them.
TORUS_MAX_BODY_BYTES = env_int("TORUS_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = TORUS_MAX_BODY_BYTES

# /readyz waits this long (seconds) for a Celery worker to answer a ping.
TORUS_READYZ_CELERY_TIMEOUT = env_int("TORUS_READYZ_CELERY_TIMEOUT", 1, minimum=1)
# /metrics (apps/core/scrape.py): Prometheus sends this token (`authorization:
# credentials_file:` in its scrape config); platform/services/up makes the file once.
TORUS_METRICS_TOKEN_FILE = env_str(
    "TORUS_METRICS_TOKEN_FILE", str(VAR_DIR / "secrets" / "metrics-token")
)
# The background builds' status files (scripts/builds, which `make up` starts).
TORUS_BUILDS_DIR = VAR_DIR / "run" / "builds"

# Jobs: where their files live (shared with the compute nodes), and the control loops.
# Files jobs see live outside VAR_DIR (which holds the platform's secrets): under DATA_DIR,
# the same /var/lib/torus/<hash of VAR_DIR> that platform/services uses (lib.sh).
DATA_DIR = Path(
    env_str("TORUS_DATA_DIR", f"/var/lib/torus/{sha256(str(VAR_DIR).encode()).hexdigest()[:12]}")
)
# The per-tenant job tree (docs/security.md), and read-only roots every job may use
# (shared environments, example code): working_dir and environment paths lie in one of them.
TORUS_JOB_ROOT = env_str("TORUS_JOB_ROOT", str(DATA_DIR / "jobs"))
TORUS_SHARED_ROOTS = env_list("TORUS_SHARED_ROOTS", [str(DATA_DIR / "shared")])
# The serving engine, llama.cpp's llama-server, and the real Llama tokenizer (a vocab-only GGUF)
# the tiny test model is made with: installed in the shared root by `make engines`
# (scripts/build-llama-server; docs/serving.md, The engine).
TORUS_LLAMA_SERVER = env_str(
    "TORUS_LLAMA_SERVER",
    str(DATA_DIR / "shared" / "engines" / "llama.cpp" / "bin" / "llama-server"),
)
TORUS_LLAMA_VOCAB = env_str(
    "TORUS_LLAMA_VOCAB",
    str(DATA_DIR / "shared" / "engines" / "llama.cpp" / "models" / "ggml-vocab-llama-spm.gguf"),
)
# Datasets (docs/datasets.md): where new versions are stored ("posix": the tenant's tree), and
# how long (seconds) the API waits for the worker to make a project's storage directories.
TORUS_DATASET_STORAGE = env_str("TORUS_DATASET_STORAGE", "posix")
TORUS_STORAGE_ENSURE_TIMEOUT = env_int("TORUS_STORAGE_ENSURE_TIMEOUT", 10, minimum=1)
# The dataset cache on each node (apps/compute/backends/stager.py): its root on node-local
# storage (a subtree per node name, tenant, project and user) and each subtree's size limit.
TORUS_DATASET_CACHE_ROOT = env_str("TORUS_DATASET_CACHE_ROOT", str(DATA_DIR / "dataset-cache"))
TORUS_DATASET_CACHE_BYTES = env_int("TORUS_DATASET_CACHE_BYTES", 100 * 1024**3, minimum=1)
# every user's subtree of a node together (apps/jobs/node_cache.py): the node's cache disk
TORUS_DATASET_CACHE_NODE_BYTES = env_int(
    "TORUS_DATASET_CACHE_NODE_BYTES", 4 * TORUS_DATASET_CACHE_BYTES, minimum=1
)

# Identities on the cluster (apps/identity): people are POSIX users, tenants and projects
# POSIX groups, from the LDAP directory the nodes resolve ("ldap") or local accounts the
# platform creates on the nodes it manages ("local").
TORUS_IDENTITY_BACKEND = env_str("TORUS_IDENTITY_BACKEND", "ldap")
TORUS_UID_RANGE = env_range("TORUS_UID_RANGE", (200000, 299999))
TORUS_GID_RANGE = env_range("TORUS_GID_RANGE", (300000, 399999))
TORUS_SERVICE_USER = env_str("TORUS_SERVICE_USER", "torus")
# The privileged helper's socket (helper/torus_helperd.py, started by platform/services):
# what needs root (directories for users, sbatch as a user, Slurm tokens) is asked of it.
TORUS_HELPER_SOCKET = env_str("TORUS_HELPER_SOCKET", str(VAR_DIR / "run" / "helper.sock"))
TORUS_LDAP_URL = env_str("TORUS_LDAP_URL", "ldap://127.0.0.1:13389")
TORUS_LDAP_BASE_DN = env_str("TORUS_LDAP_BASE_DN", "dc=torus,dc=internal")
TORUS_LDAP_BIND_DN = env_str("TORUS_LDAP_BIND_DN", f"cn=admin,{TORUS_LDAP_BASE_DN}")
TORUS_LDAP_BIND_PASSWORD_FILE = env_str(
    "TORUS_LDAP_BIND_PASSWORD_FILE", str(VAR_DIR / "secrets" / "ldap-admin.pass")
)
TORUS_RECONCILE_SECONDS = env_int("TORUS_RECONCILE_SECONDS", 2, minimum=1)
# Which clusters this deployment's workers drive: those whose config's "control_plane" names
# it ("": those that name none). Deployments sharing one database split clusters this way.
TORUS_CONTROL_PLANE = env_str("TORUS_CONTROL_PLANE", "")
TORUS_DISPATCH_GRACE_SECONDS = env_int("TORUS_DISPATCH_GRACE_SECONDS", 30, minimum=1)
TORUS_DISPATCH_THREADS = env_int("TORUS_DISPATCH_THREADS", 8, minimum=1)
TORUS_LOST_AFTER_SECONDS = env_int("TORUS_LOST_AFTER_SECONDS", 120, minimum=5)
TORUS_FAIRSHARE_DAYS = env_int("TORUS_FAIRSHARE_DAYS", 7, minimum=1)
# apps/jobs/priority.py: each AGING of waiting halves a job's size; STARVING: it goes first;
# NICE_PER_DOUBLING: the size order passed to Slurm's queue (0: submission order)
TORUS_SCHEDULING_AGING_SECONDS = env_int("TORUS_SCHEDULING_AGING_SECONDS", 600, minimum=1)
TORUS_SCHEDULING_STARVING_SECONDS = env_int("TORUS_SCHEDULING_STARVING_SECONDS", 3600, minimum=1)
TORUS_SCHEDULING_NICE_PER_DOUBLING = env_int("TORUS_SCHEDULING_NICE_PER_DOUBLING", 1000, minimum=0)
CELERY_BEAT_SCHEDULE["jobs-control-pass"] = {
    "task": "jobs.control_pass",
    "schedule": float(TORUS_RECONCILE_SECONDS),
    "options": {"expires": float(TORUS_RECONCILE_SECONDS) * 2},
}

CELERY_BEAT_SCHEDULE["logs-retention"] = {"task": "logs.apply_retention", "schedule": 3600.0}

# Usage samples (apps/logs/usage.py, idleness.py): each running job's CPU, memory and GPU every
# this many seconds into its metrics. A job with no output line and no CPU use for
# TORUS_STALLED_MINUTES is `stalled` (0: never); below these a job's CPUs (% of one core, all
# its processes together) or GPUs (utilisation %) count as idle for its project's idle policy.
TORUS_USAGE_SAMPLE_SECONDS = env_int("TORUS_USAGE_SAMPLE_SECONDS", 30, minimum=5)
TORUS_STALLED_MINUTES = env_int("TORUS_STALLED_MINUTES", 30, minimum=0)
TORUS_IDLE_CPU_PERCENT = env_int("TORUS_IDLE_CPU_PERCENT", 5, minimum=0)
TORUS_IDLE_GPU_PERCENT = env_int("TORUS_IDLE_GPU_PERCENT", 5, minimum=0)
# Expected starts (apps/jobs/runtimes.py): the past runs that predict run times are read once
# per this many seconds per process.
TORUS_ESTIMATE_HISTORY_SECONDS = env_int("TORUS_ESTIMATE_HISTORY_SECONDS", 60, minimum=1)

CELERY_BEAT_SCHEDULE["logs-usage-sample"] = {
    "task": "logs.usage_sample",
    "schedule": float(TORUS_USAGE_SAMPLE_SECONDS),
    "options": {"expires": float(TORUS_USAGE_SAMPLE_SECONDS)},
}

# S3-compatible object storage for datasets and models of kind "s3" (docs/datasets.md);
# platform/services/components/s3 writes the endpoint, region, bucket and keys to services.env.
# TORUS_S3_PUBLIC_URL: the endpoint presigned download URLs name (default: the endpoint).
TORUS_S3_ENDPOINT_URL = env_str("TORUS_S3_ENDPOINT_URL", "http://127.0.0.1:19000")
TORUS_S3_PUBLIC_URL = env_str("TORUS_S3_PUBLIC_URL", "")
TORUS_S3_REGION = env_str("TORUS_S3_REGION", "us-east-1")
TORUS_S3_BUCKET = env_str("TORUS_S3_BUCKET", "torus")
TORUS_S3_ACCESS_KEY = env_str("TORUS_S3_ACCESS_KEY", "")
TORUS_S3_SECRET_KEY = env_str("TORUS_S3_SECRET_KEY", "")
# Multipart part size (S3's minimum is 5 MiB), and where unfinished parts wait on local disk.
TORUS_S3_PART_BYTES = env_int("TORUS_S3_PART_BYTES", 8 * 1024**2, minimum=5 * 1024**2)
TORUS_S3_STAGING_DIR = env_str("TORUS_S3_STAGING_DIR", str(VAR_DIR / "s3-staging"))

# Project secrets: the key material, newest first (each entry a passphrase; Fernet keys are
# derived by HKDF). Empty: SECRET_KEY. Rotation: docs/security.md, Job secrets.
TORUS_SECRETS_KEYS = env_list("TORUS_SECRETS_KEYS", [])

# Logs: Elasticsearch and the shipper.
# a cluster: its nodes' URLs, comma-separated
TORUS_ELASTICSEARCH_URL = env_str("TORUS_ELASTICSEARCH_URL", "http://127.0.0.1:19200")
TORUS_SHIPPER_INTERVAL = float(env_int("TORUS_SHIPPER_INTERVAL_MS", 100, minimum=10)) / 1000
# how often the shipper holding shard 0 checks ended attempts against failure signatures
TORUS_SIGNATURE_SCAN_INTERVAL = float(env_int("TORUS_SIGNATURE_SCAN_MS", 1000, minimum=10)) / 1000
TORUS_SHIPPER_READ_BYTES = env_int("TORUS_SHIPPER_READ_BYTES", 1024 * 1024, minimum=65536)
TORUS_SHIPPER_READS_PER_PASS = env_int("TORUS_SHIPPER_READS_PER_PASS", 8, minimum=1)
TORUS_SHIPPER_BULK_DOCS = env_int("TORUS_SHIPPER_BULK_DOCS", 2000, minimum=1)
TORUS_SHIPPER_RECENT_HOURS = env_int("TORUS_SHIPPER_RECENT_HOURS", 72, minimum=1)
# Shippers share attempts in this many shards, each held by one shipper's lease; a dead
# shipper's shards pass to the others after the lease's seconds (apps/logs/shards.py).
TORUS_SHIPPER_SHARDS = env_int("TORUS_SHIPPER_SHARDS", 16, minimum=1)
TORUS_SHIPPER_LEASE_SECONDS = env_int("TORUS_SHIPPER_LEASE_SECONDS", 5, minimum=1)
TORUS_LOG_MAX_LINE = env_int("TORUS_LOG_MAX_LINE", 16 * 1024, minimum=256)
# Live tail: lines per second one websocket viewer receives at most (beyond: a "skipped" notice).
TORUS_LIVE_MAX_LINES_PER_SECOND = env_int("TORUS_LIVE_MAX_LINES_PER_SECOND", 5000, minimum=10)
# Open websockets re-check their access this often (seconds), a backstop to the access-changed
# messages services publish: expiry, a missed message. See docs/logs.md (close codes).
TORUS_LIVE_ACCESS_RECHECK_SECONDS = env_int("TORUS_LIVE_ACCESS_RECHECK_SECONDS", 5, minimum=1)

# Access tokens: last use is written at most this often (seconds), with an audit event.
TORUS_TOKEN_USE_RECORD_INTERVAL = env_int("TORUS_TOKEN_USE_RECORD_INTERVAL", 60, minimum=0)

# Sign-in: failed attempts per account and per address within the window lock that account or
# address for the lockout (answered exactly like a wrong password; apps/tenancy/signin.py).
TORUS_SIGNIN_ACCOUNT_FAILURES = env_int("TORUS_SIGNIN_ACCOUNT_FAILURES", 5, minimum=1)
TORUS_SIGNIN_ADDRESS_FAILURES = env_int("TORUS_SIGNIN_ADDRESS_FAILURES", 20, minimum=1)
TORUS_SIGNIN_WINDOW_SECONDS = env_int("TORUS_SIGNIN_WINDOW_SECONDS", 15 * 60, minimum=1)
TORUS_SIGNIN_LOCKOUT_SECONDS = env_int("TORUS_SIGNIN_LOCKOUT_SECONDS", 15 * 60, minimum=1)

# Sign-in against the directory (TORUS_LDAP_URL, TORUS_LDAP_BASE_DN above; people are
# uid=<name>,ou=people,<base>; apps/tenancy/ldap_signin.py): tried first, then local accounts.
TORUS_LDAP_ENABLED = env_bool("TORUS_LDAP_ENABLED", True)
TORUS_LDAP_TIMEOUT = env_int("TORUS_LDAP_TIMEOUT", 3, minimum=1)  # seconds, connect and reply
AUTHENTICATION_BACKENDS = [
    *(["apps.tenancy.ldap_signin.TorusLDAPBackend"] if TORUS_LDAP_ENABLED else []),
    "django.contrib.auth.backends.ModelBackend",
]

# Invitations: how long one stays valid, and the address its link points at.
TORUS_INVITATION_SECONDS = env_int("TORUS_INVITATION_SECONDS", 7 * 24 * 3600, minimum=60)
TORUS_PUBLIC_URL = env_str("TORUS_PUBLIC_URL", "http://127.0.0.1:8000")
# E-mail (invitations): kept in memory by default, so nothing leaves the process and the admin
# passes on the link from the create response; set the SMTP backend and host to mail it.
EMAIL_BACKEND = env_str("TORUS_EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")
EMAIL_HOST = env_str("TORUS_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("TORUS_EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("TORUS_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env_str("TORUS_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("TORUS_EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("TORUS_EMAIL_FROM", "torus@localhost")

# Model registry webhooks (docs/registry.md): private, loopback and link-local targets are
# refused unless allowed here; tries back off exponentially from the base.
TORUS_WEBHOOK_ALLOW_PRIVATE = env_bool("TORUS_WEBHOOK_ALLOW_PRIVATE", False)
TORUS_WEBHOOK_ALLOWED_CIDRS = env_list("TORUS_WEBHOOK_ALLOWED_CIDRS", [])
TORUS_WEBHOOK_MAX_ATTEMPTS = env_int("TORUS_WEBHOOK_MAX_ATTEMPTS", 6, minimum=1)
TORUS_WEBHOOK_BACKOFF_SECONDS = env_int("TORUS_WEBHOOK_BACKOFF_SECONDS", 10, minimum=0)
TORUS_WEBHOOK_TIMEOUT_SECONDS = env_int("TORUS_WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
CELERY_BEAT_SCHEDULE["registry-webhook-sweep"] = {
    "task": "registry.webhook_sweep",
    "schedule": 60.0,
}

# Notifications (docs/notifications.md): a person gets at most one message per job a minute
# and, past this many messages in an hour, one digest at the hour's end; a message that cannot
# be sent is tried with backoff for this many hours. The sweep sends what is due.
TORUS_NOTIFY_HOURLY_LIMIT = env_int("TORUS_NOTIFY_HOURLY_LIMIT", 20, minimum=1)
TORUS_NOTIFY_RETRY_HOURS = env_int("TORUS_NOTIFY_RETRY_HOURS", 24, minimum=0)
CELERY_BEAT_SCHEDULE["notifications-sweep"] = {"task": "notifications.sweep", "schedule": 5.0}

# Model deployments (docs/serving.md): the reconciler's period; a READY replica is replaced
# after this many failed /health probes in a row, a starting one when not ready this long
# after its job started; a draining one is stopped at the latest after the drain timeout;
# autoscaling scales down only after the load wanted fewer replicas this long; a deployment
# fails after this many replicas in a row ended before they were ready.
TORUS_SERVING_RECONCILE_SECONDS = env_int("TORUS_SERVING_RECONCILE_SECONDS", 2, minimum=1)
TORUS_SERVING_HEALTH_FAILURES = env_int("TORUS_SERVING_HEALTH_FAILURES", 3, minimum=1)
TORUS_SERVING_START_TIMEOUT_S = env_int("TORUS_SERVING_START_TIMEOUT_S", 300, minimum=5)
TORUS_SERVING_DRAIN_TIMEOUT_S = env_int("TORUS_SERVING_DRAIN_TIMEOUT_S", 120, minimum=1)
TORUS_SERVING_SCALE_DOWN_AFTER_S = env_int("TORUS_SERVING_SCALE_DOWN_AFTER_S", 60, minimum=0)
TORUS_SERVING_MAX_START_FAILURES = env_int("TORUS_SERVING_MAX_START_FAILURES", 3, minimum=1)
# how long the gateway holds a request for a deployment waking from zero replicas
TORUS_SERVING_COLD_START_S = env_int("TORUS_SERVING_COLD_START_S", 180, minimum=1)
CELERY_BEAT_SCHEDULE["serving-reconcile"] = {
    "task": "serving.reconcile",
    "schedule": float(TORUS_SERVING_RECONCILE_SECONDS),
    "options": {"expires": float(TORUS_SERVING_RECONCILE_SECONDS) * 2},
}

# Purge (apps/lifecycle/purge.py): an archived thing may be purged this many days after its
# archiving; purges left running (a crash) are resumed by beat
TORUS_ARCHIVE_RETENTION_DAYS = env_int("TORUS_ARCHIVE_RETENTION_DAYS", 30, minimum=0)
CELERY_BEAT_SCHEDULE["lifecycle-purge-resume"] = {
    "task": "lifecycle.purge_resume",
    "schedule": 300.0,
    "options": {"expires": 600.0},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.tenancy.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "apps.tenancy.api.permissions.MatrixPermission",  # the role matrix, on every action
    ],
    "DEFAULT_PARSER_CLASSES": ["apps.core.api.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["apps.core.api.renderers.JSONRenderer"],  # orjson
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.pagination.CursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "apps.core.api.archived.ArchivedFilter",
    ],
    "ORDERING_PARAM": "ordering",
    "DEFAULT_THROTTLE_CLASSES": [
        "apps.core.api.throttling.PrincipalRateThrottle",
        "apps.core.api.throttling.AnonymousRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "principal": env_str("TORUS_THROTTLE_PRINCIPAL", "6000/min"),
        "anon": env_str("TORUS_THROTTLE_ANON", "600/min"),
    },
    "EXCEPTION_HANDLER": "apps.core.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "apps.core.api.schema.TorusAutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Torus API",
    "DESCRIPTION": "Multi-tenant AI compute: tenants, projects, tokens, jobs, logs.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "TenantRoleEnum": "apps.tenancy.models.Role",
        "JobStateEnum": "apps.jobs.states.State",
        "AttemptStateEnum": "apps.jobs.models.AttemptState",
        "JobKindEnum": "apps.jobs.models.Kind",
        "ModelVersionStateEnum": "apps.registry.models.VersionState",
        "KvCacheTypeEnum": "apps.serving.models.KvCacheType",
        "EstimateKvCacheTypeEnum": "apps.compute.fit.KV_TYPE_NAMES",
        "PurgeKindEnum": "apps.lifecycle.models.Kind",
        "EventsEnum": "apps.registry.models.WebhookEvent",  # the webhooks' (the name it had)
        "NotificationEventEnum": "apps.notifications.models.Event",
        "NotificationChannelEnum": "apps.notifications.models.Channel",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("TORUS_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        "httpx": {"level": "WARNING"},
        "elastic_transport": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
