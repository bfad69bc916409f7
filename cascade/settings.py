"""Cascade's settings: every deployment value comes from the environment.

The defaults are the embedded mode (SQLite in ./var, DEBUG off, a secret key generated
once into ./var): safe to run on a laptop, and every value is overridden in production
through the variables documented in docs/configuration.md.

Why one module: Django reads one settings module, and an operator looking for where a variable
is read greps one file; each section below is one subsystem's settings.
"""

import ipaddress
import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from botocore.config import Config as BotoConfig
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from cascade.addresses import parse_networks

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CASCADE_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {value!r}") from None


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def embedded_secret_key() -> str:
    """A per-installation key kept in VAR_DIR, so that no secret lives in the code.

    Written to a file created 0600 (never readable by others, not even for a moment) and
    linked into place only when complete, so that two processes starting at once agree.
    """
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        partial = VAR_DIR / f".secret_key.{os.getpid()}.{secrets.token_hex(4)}"
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_urlsafe(50))
            os.link(partial, path)
        except FileExistsError:
            pass  # another process got there first: its key is the key
        finally:
            partial.unlink(missing_ok=True)
    return path.read_text().strip()


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or embedded_secret_key()
DEBUG = env_bool("DJANGO_DEBUG")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

# Behind a TLS-terminating proxy: trust its X-Forwarded-Proto, send cookies over HTTPS only.
if env_bool("DJANGO_HTTPS"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # HTTPS only, and browsers told so for a year (subdomains are the operator's call).
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 365 * 24 * 3600)
    # Subdomains and the browsers' preload list concern the whole domain, not Cascade: the
    # operator opts in, and `check --deploy` does not nag when they have not.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS")
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD")
    SILENCED_SYSTEM_CHECKS = [
        *(["security.W005"] if not SECURE_HSTS_INCLUDE_SUBDOMAINS else []),
        *(["security.W021"] if not SECURE_HSTS_PRELOAD else []),
    ]

INSTALLED_APPS = [
    # The admin registers its pages when the URLconf loads (cascade/urls.py): a process that serves
    # no page (ingest_traces, a Celery worker) never imports them.
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "csp",
    "traces",
    "simulations",
    "ingest",
]

MIDDLEWARE = [
    # First: the request's id is known before anything can fail or log (cascade.logs).
    "cascade.logs.RequestIdMiddleware",
    "cascade.metrics.RequestMetricsMiddleware",
    # /healthz, /readyz, /metrics: answered before host checks, redirects and sessions.
    "cascade.health.OperatorEndpointsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Under /api/: a parameter with NUL or over 1,000 characters is a 400 before any view.
    "traces.params.QueryTextMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it answers a locked-out login with 429.
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy on every answer (django-csp): scripts and everything else only from
# Cascade itself, so that a name or a field that slipped through escaping could not run a
# script. Styles may be inline: Django's admin, DRF's browsable API, Swagger UI and the admin's
# charts (a colour per kernel) write style attributes; a style cannot run code.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        # Swagger UI's and the admin's icons are partly data: URLs.
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Password logins (the admin's and the browsable API's forms) are throttled by django-axes:
# CASCADE_LOGIN_FAILURE_LIMIT wrong passwords for one user from one address (the client's,
# cascade.addresses) lock that pair out for CASCADE_LOGIN_COOLOFF_MINUTES. API tokens are
# throttled by TokenRateThrottle instead, requests without a token by AnonAddressThrottle.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("CASCADE_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("CASCADE_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True


# The client's address, for lockouts and the anonymous throttle (cascade.addresses):
# X-Forwarded-For is believed only from these proxies (CIDR networks, comma-separated; empty:
# nobody, so every client is its REMOTE_ADDR).
CASCADE_TRUSTED_PROXIES = os.environ.get("CASCADE_TRUSTED_PROXIES", "")
try:
    parse_networks(CASCADE_TRUSTED_PROXIES)
except ValueError as problem:
    raise ImproperlyConfigured(f"CASCADE_TRUSTED_PROXIES: {problem}") from None
if "CASCADE_PROXY_COUNT" in os.environ:
    # It trusted X-Forwarded-For from whoever reached gunicorn: refused, not silently ignored.
    raise ImproperlyConfigured(
        "CASCADE_PROXY_COUNT is no longer read: set CASCADE_TRUSTED_PROXIES to your proxies' addresses "
        "(such as 127.0.0.1/32 for nginx on this host; docs/production.md) and unset CASCADE_PROXY_COUNT"
    )
AXES_CLIENT_IP_CALLABLE = "cascade.addresses.client_address"

ROOT_URLCONF = "cascade.urls"
WSGI_APPLICATION = "cascade.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

if not os.environ.get("DATABASE_URL"):
    VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{VAR_DIR / 'cascade.sqlite3'}",
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded mode runs a poller and a web server on one file: wait for the
    # writer instead of failing with "database is locked". A busy timeout alone is not enough:
    # a transaction that began as a reader and then writes cannot wait (SQLite answers "locked"
    # at once, since waiting could deadlock), so transactions take the write lock when they
    # begin (IMMEDIATE), and WAL lets the web server read while the poller writes.
    _sqlite = DATABASES["default"].setdefault("OPTIONS", {})
    _sqlite["timeout"] = 30
    _sqlite.setdefault("transaction_mode", "IMMEDIATE")
    _sqlite.setdefault("init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
    # A file, not memory, so that the tests' child processes (workers, a second pass) share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}

# Reads of the web tier (the API's GETs, the admin's pages) from a PostgreSQL replica, the
# rest on the primary (cascade.db_routers says what goes where); empty: everything on DATABASE_URL.
DATABASE_REPLICA_URL = os.environ.get("DATABASE_REPLICA_URL", "")
if DATABASE_REPLICA_URL:
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        raise ImproperlyConfigured(
            "DATABASE_REPLICA_URL is a PostgreSQL replica: set DATABASE_URL to its primary"
        )
    DATABASES["replica"] = {
        **dj_database_url.parse(DATABASE_REPLICA_URL, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0)),
        # The tests see one database: the replica's connection opens the primary's test database.
        "TEST": {"MIRROR": "default"},
    }
    DATABASE_ROUTERS = ["cascade.db_routers.ReplicaRouter"]
    MIDDLEWARE.insert(
        MIDDLEWARE.index("cascade.health.OperatorEndpointsMiddleware") + 1,
        "cascade.db_routers.ReplicaReadsMiddleware",
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", VAR_DIR / "static"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# S3: the bucket the profiler uploads to, the `traces` storage of STORAGES below (django-storages'
# S3Storage, as ingest.storage.TraceStorage); credentials come from the standard AWS variables
# (or an instance role).
CASCADE_S3_BUCKET = os.environ.get("CASCADE_S3_BUCKET", "")
CASCADE_S3_ENDPOINT_URL = os.environ.get("CASCADE_S3_ENDPOINT_URL") or None
CASCADE_S3_PREFIX = os.environ.get("CASCADE_S3_PREFIX", "accelsim-traces/")
# The address clients reach the bucket at, when it is not CASCADE_S3_ENDPOINT_URL (the
# server's, inside a private network): GET /api/traces/{id}/files signs its URLs for it.
CASCADE_S3_PUBLIC_ENDPOINT_URL = os.environ.get("CASCADE_S3_PUBLIC_ENDPOINT_URL") or None
# How long those presigned URLs stay valid; Signature Version 4 allows at most 7 days.
CASCADE_PRESIGN_SECONDS = env_int("CASCADE_PRESIGN_SECONDS", 3600)
if not 1 <= CASCADE_PRESIGN_SECONDS <= 7 * 24 * 3600:
    raise ImproperlyConfigured(
        f"CASCADE_PRESIGN_SECONDS must be between 1 and 604800 (7 days), got {CASCADE_PRESIGN_SECONDS}"
    )
# A simulation's upload (POST .../simulations/{name}/upload): a file of at least this many
# bytes is uploaded in parts (S3's multipart upload), each part this long but the last; S3
# takes parts of 5 MiB to 5 GiB and at most 10,000 of them.
CASCADE_SIM_MULTIPART_BYTES = env_int("CASCADE_SIM_MULTIPART_BYTES", 64 * 1024**2)
CASCADE_SIM_PART_BYTES = env_int("CASCADE_SIM_PART_BYTES", 64 * 1024**2)
if not 5 * 1024**2 <= CASCADE_SIM_PART_BYTES <= 5 * 1024**3:
    raise ImproperlyConfigured(
        f"CASCADE_SIM_PART_BYTES must be between 5 MiB and 5 GiB (S3's part sizes), got {CASCADE_SIM_PART_BYTES}"
    )
if CASCADE_SIM_MULTIPART_BYTES < 1:
    raise ImproperlyConfigured(
        f"CASCADE_SIM_MULTIPART_BYTES must be at least 1, got {CASCADE_SIM_MULTIPART_BYTES}"
    )
# Keys per listing request: 1,000 is S3's maximum. The tests list with a few, to page cheaply.
CASCADE_S3_PAGE_SIZE = env_int("CASCADE_S3_PAGE_SIZE", 1000)
if CASCADE_S3_PAGE_SIZE < 1:
    raise ImproperlyConfigured(f"CASCADE_S3_PAGE_SIZE must be at least 1, got {CASCADE_S3_PAGE_SIZE}")
# S3 requests a pass keeps in flight (listings, metadata.json, small stats files), each thread
# with its own client; 1: one after another. The database work stays on the pass's own thread.
CASCADE_S3_THREADS = env_int("CASCADE_S3_THREADS", 8)
if CASCADE_S3_THREADS < 1:
    raise ImproperlyConfigured(f"CASCADE_S3_THREADS must be at least 1, got {CASCADE_S3_THREADS}")
# Processes a `manage.py ingest_traces` pass parses in when it has many traces to parse
# (ingest.processes): at most one per core, and one per CASCADE_PARSES_PER_PROCESS traces (a
# process takes half a second to start), each with its own S3 threads; 1: the pass's own
# process alone. On PostgreSQL only (SQLite takes one writer at a time); Celery's polls parse
# in their worker's process, the workers being the parallelism there.
CASCADE_PARSE_PROCESSES = env_int("CASCADE_PARSE_PROCESSES", os.cpu_count() or 1)
CASCADE_PARSES_PER_PROCESS = env_int("CASCADE_PARSES_PER_PROCESS", 100)
for _name in ("CASCADE_PARSE_PROCESSES", "CASCADE_PARSES_PER_PROCESS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1, got {globals()[_name]}")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    # Built on first use (ingest.storage.traces): ImproperlyConfigured then without a bucket.
    "traces": {
        "BACKEND": "ingest.storage.TraceStorage",
        "OPTIONS": {
            "bucket_name": CASCADE_S3_BUCKET,
            "endpoint_url": CASCADE_S3_ENDPOINT_URL,
            "region_name": os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION"),
            "location": "",
            # A stalled S3 call times out after CASCADE_S3_READ_TIMEOUT seconds without a byte
            # and is retried (logged: ingest.storage) up to CASCADE_S3_MAX_ATTEMPTS tries in all;
            # then the pass reports the trace and the next pass tries again. Presigned URLs are
            # Signature Version 4 (botocore still presigns version 2 in us-east-1 unless told,
            # which AWS no longer accepts in most regions).
            "client_config": BotoConfig(
                signature_version="s3v4",
                connect_timeout=env_int("CASCADE_S3_CONNECT_TIMEOUT", 5),
                read_timeout=env_int("CASCADE_S3_READ_TIMEOUT", 10),
                retries={"total_max_attempts": env_int("CASCADE_S3_MAX_ATTEMPTS", 5), "mode": "standard"},
                # One client serves a process's S3 threads (ingest.storage): a connection each.
                max_pool_connections=max(10, CASCADE_S3_THREADS),
            ),
        },
    },
}

# Ingestion
CASCADE_UPLOAD_TIMEOUT = env_int("CASCADE_UPLOAD_TIMEOUT", 24 * 3600)
CASCADE_MAX_STATS_BYTES = env_int("CASCADE_MAX_STATS_BYTES", 2 * 1024**3)
# A stats line longer than this fails its trace at once (the longest real kernel name is a
# few kilobytes; a line of a CUDA graph's run-together launches holds about 400 bytes each).
CASCADE_MAX_STATS_LINE = env_int("CASCADE_MAX_STATS_LINE", 16 * 1024**2)
# A simulation's log (sim.log, or decompressed sim.log.gz / .xz) past this many bytes fails it.
CASCADE_MAX_SIM_LOG_BYTES = env_int("CASCADE_MAX_SIM_LOG_BYTES", 8 * 1024**3)
# A simulation's log whose reading (download, decompression, the reader) costs its thread more
# CPU seconds than this fails it: no log holds a pass, or a web process's upload thread, longer.
CASCADE_SIM_LOG_CPU_SECONDS = env_int("CASCADE_SIM_LOG_CPU_SECONDS", 300)
if CASCADE_SIM_LOG_CPU_SECONDS < 1:
    raise ImproperlyConfigured(
        f"CASCADE_SIM_LOG_CPU_SECONDS must be at least 1, got {CASCADE_SIM_LOG_CPU_SECONDS}"
    )
# A parse reports progress (ingest_traces prints it) every this many kernels.
CASCADE_PROGRESS_EVERY = env_int("CASCADE_PROGRESS_EVERY", 100_000)
if CASCADE_PROGRESS_EVERY < 1:
    raise ImproperlyConfigured(f"CASCADE_PROGRESS_EVERY must be at least 1, got {CASCADE_PROGRESS_EVERY}")
# What one run's metadata.json may put into every user's responses; past a bound the trace
# fails with a message that names it (ingest.metadata.MetadataLimits has the reasons).
CASCADE_METADATA_MAX_BYTES = env_int("CASCADE_METADATA_MAX_BYTES", 8 * 1024**2)
CASCADE_METADATA_MAX_DEPTH = env_int("CASCADE_METADATA_MAX_DEPTH", 32)
CASCADE_METADATA_MAX_STRING = env_int("CASCADE_METADATA_MAX_STRING", 256)
CASCADE_METADATA_MAX_LAYERS = env_int("CASCADE_METADATA_MAX_LAYERS", 1000)
CASCADE_POLL_SECONDS = env_int("CASCADE_POLL_SECONDS", 30)
# S3's event notifications through an SQS queue (ingest.events): with a queue, a run is ingested
# as its files land, and the poll only reconciles, every CASCADE_POLL_SECONDS_WITH_EVENTS.
CASCADE_SQS_QUEUE_URL = os.environ.get("CASCADE_SQS_QUEUE_URL", "")
# Where SQS answers; unset: the S3 endpoint (CASCADE_S3_ENDPOINT_URL), or AWS's for the region.
CASCADE_SQS_ENDPOINT_URL = os.environ.get("CASCADE_SQS_ENDPOINT_URL") or None
# A receive waits this long for a first message (a long poll; SQS allows 0 to 20).
CASCADE_SQS_WAIT_SECONDS = env_int("CASCADE_SQS_WAIT_SECONDS", 20)
if not 0 <= CASCADE_SQS_WAIT_SECONDS <= 20:
    raise ImproperlyConfigured(f"CASCADE_SQS_WAIT_SECONDS must be 0 to 20, got {CASCADE_SQS_WAIT_SECONDS}")
CASCADE_POLL_SECONDS_WITH_EVENTS = env_int("CASCADE_POLL_SECONDS_WITH_EVENTS", 600)
for _name in ("CASCADE_POLL_SECONDS", "CASCADE_POLL_SECONDS_WITH_EVENTS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1, got {globals()[_name]}")
# A trace whose parse raises something that is neither bad input nor a passing fault of S3 or
# the database (a bug of ours) is tried this many times, then failed (ingest.failures).
CASCADE_PARSE_ATTEMPTS = env_int("CASCADE_PARSE_ATTEMPTS", 3)
if CASCADE_PARSE_ATTEMPTS < 1:
    raise ImproperlyConfigured(f"CASCADE_PARSE_ATTEMPTS must be at least 1, got {CASCADE_PARSE_ATTEMPTS}")
# A ready run's metadata.json is compared with the bucket's (one HEAD request) this often: a
# re-uploaded run is noticed and parsed again.
CASCADE_READY_RECHECK_SECONDS = env_int("CASCADE_READY_RECHECK_SECONDS", 600)
# A polling pass (no S3 events) also lists up to this many pages (CASCADE_S3_PAGE_SIZE keys each)
# of the whole prefix and compares them with the database (ingest.sweep.watch_pages): a file
# landed in a ready trace's simulations/ folder is found within one poll while the prefix holds
# fewer objects than that; past it, within prefix pages / this passes. 0: off (the ready recheck).
CASCADE_POLL_WATCH_PAGES = env_int("CASCADE_POLL_WATCH_PAGES", 20)
# Each scheduled poll (beat, `ingest_traces --watch`) also re-reads this many traces that an
# older version of the stats parser read; `ingest_traces --reparse-outdated` does all at once.
CASCADE_REPARSE_OUTDATED = env_bool("CASCADE_REPARSE_OUTDATED", False)
CASCADE_REPARSE_OUTDATED_BATCH = env_int("CASCADE_REPARSE_OUTDATED_BATCH", 10)

REST_FRAMEWORK = {
    # The first class answers 401s: its WWW-Authenticate header is "Bearer".
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "traces.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    # JSON bodies bounded in size and depth, every parse error a 400 (traces.parsers).
    "DEFAULT_PARSER_CLASSES": [
        "traces.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": [
        "traces.throttling.TokenRateThrottle",
        "traces.throttling.AnonAddressThrottle",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
# The OpenAPI schema (/api/schema) and Swagger UI (/api/docs): public, since they hold no data
# (traces.openapi); Swagger UI's files are served from the sidecar app, never from a CDN.
SPECTACULAR_SETTINGS = {
    "TITLE": "Cascade",
    "DESCRIPTION": "A registry of Accel-Sim GPU traces: the Traces API, as the published reference documents it.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "AUTHENTICATION_WHITELIST": ["traces.authentication.BearerTokenAuthentication"],
    "PREPROCESSING_HOOKS": ["traces.openapi.paths_without_slash"],
    # A trace's (and a simulation's) states and the sweeps': each set its own component.
    "ENUM_NAME_OVERRIDES": {
        "StateEnum": "traces.shapes.STATES",
        "SweepStateEnum": "simulations.sweep_shapes.SWEEP_STATES",
        "SweepJobStateEnum": "simulations.sweep_shapes.JOB_STATES",
        "SweepJobEndEnum": "simulations.sweep_shapes.FINISH_STATES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "traces.openapi.finish_schema",
    ],
}
# Requests one API token may make (a token's own `rate` overrides it); empty: unlimited.
CASCADE_API_RATE = os.environ.get("CASCADE_API_RATE", "100/second")
# Requests without valid credentials one client address may make (the index, the schema, 401s;
# traces.throttling.AnonAddressThrottle); empty: unlimited.
CASCADE_ANON_RATE = os.environ.get("CASCADE_ANON_RATE", "120/minute")
# Throttle counts (and anything else cached) shared by every web worker: Redis in production.
CASCADE_CACHE_URL = os.environ.get("CASCADE_CACHE_URL", "")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CASCADE_CACHE_URL}
        if CASCADE_CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# A large trace detail's gzip and zstd answers kept on disk in $CASCADE_VAR_DIR/body-cache/
# (traces.body_cache), at most this many bytes in all (least recently served first out); 0: off.
CASCADE_BODY_CACHE_BYTES = env_int("CASCADE_BODY_CACHE_BYTES", 2 * 1024**3)

# A ready large trace's detail, written once in identity, gzip and zstd to the database in the
# background after its parse (traces.detail_bodies), every web node serving it from there: at
# most this many bytes in all (the oldest-written traces' first out); 0: none is written.
CASCADE_DETAIL_BODIES_BYTES = env_int("CASCADE_DETAIL_BODIES_BYTES", 20 * 1024**3)

# Logs: Cascade's loggers and Django's request errors (a 500's traceback) on stderr, each line
# with the request's id (cascade.logs); CASCADE_LOG_FORMAT=json: one JSON object a line.
CASCADE_LOG_FORMAT = os.environ.get("CASCADE_LOG_FORMAT", "plain").strip().lower() or "plain"
if CASCADE_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"CASCADE_LOG_FORMAT must be plain or json, got {CASCADE_LOG_FORMAT!r}")
CASCADE_LOG_LEVEL = os.environ.get("CASCADE_LOG_LEVEL", "INFO")
_stderr = {"handlers": ["stderr"], "level": CASCADE_LOG_LEVEL, "propagate": False}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "cascade.logs.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s"},
        "json": {"()": "cascade.logs.JsonFormatter"},
    },
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "formatter": CASCADE_LOG_FORMAT,
            "filters": ["request_id"],
        },
    },
    # Not propagated: Celery adds a root handler in workers, and every line would show twice.
    "loggers": {
        "ingest": _stderr,
        "traces": _stderr,
        "simulations": _stderr,
        "cascade": _stderr,
        # Server errors (with their traceback) and refused requests (DisallowedHost...).
        "django.request": {**_stderr, "level": "ERROR"},
        "django.security": {**_stderr, "level": "WARNING"},
    },
}

# Metrics (GET /metrics, cascade.metrics): each process on this host (web workers, the poller,
# Celery workers) keeps its counters in files in this directory, which a scrape sums.
CASCADE_METRICS_DIR = Path(
    os.environ.get("CASCADE_METRICS_DIR") or os.environ.get("PROMETHEUS_MULTIPROC_DIR") or VAR_DIR / "metrics"
)
CASCADE_METRICS_DIR.mkdir(parents=True, exist_ok=True)
# Who may scrape: these addresses or networks (CIDR), or whoever sends this bearer token.
CASCADE_METRICS_ALLOWED = env_list("CASCADE_METRICS_ALLOWED", "127.0.0.1,::1")
for _network in CASCADE_METRICS_ALLOWED:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"CASCADE_METRICS_ALLOWED: {_network!r} is not an address or a network (10.0.0.0/8)"
        ) from None
CASCADE_METRICS_TOKEN = os.environ.get("CASCADE_METRICS_TOKEN", "")

# --- Celery ---------------------------------------------------------------------------------------
# `celery -A cascade beat` sends a poll every CASCADE_POLL_SECONDS; `celery -A cascade worker` runs
# polls and parses, one trace per task. docs/production.md explains how to run and scale them.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
# A deployment with Celery sets the broker: the admin's Re-ingest then queues a task instead
# of starting a background thread in the web process.
CASCADE_CELERY_CONFIGURED = bool(os.environ.get("CELERY_BROKER_URL"))
# Without Celery, each web process re-ingests one trace at a time in a background thread; at
# most this many more wait their turn, and the admin refuses the rest (ingest/reingest.py).
CASCADE_REINGEST_QUEUE = env_int("CASCADE_REINGEST_QUEUE", 20)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Nobody waits on a task: its outcome is the trace's state in the database.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# Two deployments (or two test runs) sharing one broker keep apart by queue name.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CASCADE_CELERY_QUEUE", "cascade")
CELERY_TIMEZONE = TIME_ZONE
# A message is acknowledged when its parse ends, not when it starts: a worker killed mid-parse
# leaves it to the broker, which hands it to another worker. One message at a time per process,
# so that a long parse does not sit on messages other workers could take.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# A parse gets CASCADE_PARSE_SECONDS (soft: the trace is marked failed), then a minute's grace
# before it is killed. Redis redelivers an unacknowledged message after the visibility timeout,
# so the timeout must outlast the longest task, or a live parse would be handed out twice.
CASCADE_PARSE_SECONDS = env_int("CASCADE_PARSE_SECONDS", 3600)
CELERY_TASK_SOFT_TIME_LIMIT = CASCADE_PARSE_SECONDS
CELERY_TASK_TIME_LIMIT = CASCADE_PARSE_SECONDS + 60
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CASCADE_VISIBILITY_TIMEOUT", CELERY_TASK_TIME_LIMIT + 600),
}
if CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] <= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        "CASCADE_VISIBILITY_TIMEOUT must be longer than CASCADE_PARSE_SECONDS + 60, or Redis would "
        "hand a parse that is still running to a second worker"
    )
# Sweeps (simulations.sweeps): a running job whose worker has not reported for the lease is
# queued again (published again) by the watcher, which beat runs every CASCADE_SWEEP_WATCH_SECONDS
# and `ingest_traces --watch` on each pass; a job that failed this many times stays failed.
CASCADE_SWEEP_LEASE_SECONDS = env_int("CASCADE_SWEEP_LEASE_SECONDS", 120)
CASCADE_SWEEP_ATTEMPTS = env_int("CASCADE_SWEEP_ATTEMPTS", 3)
CASCADE_SWEEP_WATCH_SECONDS = env_int("CASCADE_SWEEP_WATCH_SECONDS", 30)
# With events on, the poll reconciles (a lost or unconfigured notification) at a longer interval.
_POLL_EVERY = CASCADE_POLL_SECONDS_WITH_EVENTS if CASCADE_SQS_QUEUE_URL else CASCADE_POLL_SECONDS
CELERY_BEAT_SCHEDULE = {
    "poll-bucket": {
        "task": "ingest.tasks.poll_bucket_task",
        "schedule": _POLL_EVERY,
        # After an outage the backlog holds one poll, not one per missed interval.
        "options": {"expires": _POLL_EVERY},
    },
}
CELERY_BEAT_SCHEDULE["sweep-watch"] = {
    "task": "simulations.tasks.watch_sweeps_task",
    "schedule": CASCADE_SWEEP_WATCH_SECONDS,
    "options": {"expires": CASCADE_SWEEP_WATCH_SECONDS},
}
# A batch of events every few seconds; one at a time (a lock): the others return at once.
CASCADE_EVENTS_TASK_SECONDS = 5
if CASCADE_SQS_QUEUE_URL:
    CELERY_BEAT_SCHEDULE["s3-events"] = {
        "task": "ingest.tasks.s3_events_task",
        "schedule": CASCADE_EVENTS_TASK_SECONDS,
        "options": {"expires": CASCADE_EVENTS_TASK_SECONDS},
    }
