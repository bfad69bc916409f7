"""gunicorn's settings for Cascade, read by `gunicorn cascade.wsgi` from this folder.

Threads, not sync workers: a sync worker is one request at a time, so three clients sending
their headers a byte every two seconds stopped all three workers, and `--timeout` killed a
worker (and cut the download) whenever one response took longer than it, which a
million-launch trace does for any slow client (docs/performance.md). In the threaded worker the
timeout only watches that the worker process is alive; a slow download holds one thread, not
the worker. In front of the Internet, put nginx before gunicorn (docs/production.md): it
buffers slow clients' requests and responses so that no thread waits on them at all.

Every value can be overridden on the command line or with GUNICORN_CMD_ARGS.
"""

import os

# This host only, unless told otherwise (CASCADE_BIND=0.0.0.0:8000 in a container, behind its
# proxy): whoever reaches gunicorn directly bypasses the proxy, whose X-Forwarded-For is the only
# one Cascade believes (CASCADE_TRUSTED_PROXIES, docs/production.md).
bind = os.environ.get("CASCADE_BIND", "127.0.0.1:8000")
worker_class = "gthread"
workers = int(os.environ.get("CASCADE_WEB_WORKERS", 2))
threads = int(os.environ.get("CASCADE_WEB_THREADS", 16))
# The worker must show life this often; requests themselves are not timed (see above).
timeout = 60
graceful_timeout = 30
keepalive = 5
# Refusals of oversized requests (gunicorn answers 400/414/431 itself, before Django, with an
# HTML page: the proxy answers them in JSON, docs/production.md; nginx's own limits match these).
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 8190
# With an access log (--access-logfile -): gunicorn's usual line and the request's id (the
# X-Request-ID Cascade answered with, which its own log lines of that request carry).
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %({x-request-id}o)s'


def post_worker_init(worker):
    """Stop on SIGQUIT and SIGINT (quick shutdown) without touching the thread pool.

    gunicorn 27's threaded worker shuts its pool down inside that signal's handler. A signal
    that lands while the worker's main thread is inside the pool's submit(), which holds the
    pool's lock, deadlocks the worker for good: the master gives up after the graceful timeout
    and the worker lives on, holding the port and whatever it inherited (seen in a test run:
    `ThreadPoolExecutor.shutdown` under `handle_quit` under `ThreadPoolExecutor.submit`). The
    base worker's handler stops the same way, and the interpreter's exit joins the pool.
    gunicorn has no setting for it; this hook (public) installs the base class's handler, called
    as the base class's method (bypassing the threaded worker's override). tests/test_gunicorn_conf.py
    fails if the base handler stops stopping the worker, and once gunicorn's threaded handler
    no longer shuts the pool down (then this hook can go).
    """
    import functools
    import signal

    from gunicorn.workers.base import Worker

    quit_now = functools.partial(Worker.handle_quit, worker)
    signal.signal(signal.SIGQUIT, quit_now)
    signal.signal(signal.SIGINT, quit_now)


# /metrics sums the counters every process on this host keeps in CASCADE_METRICS_DIR
# (cascade.metrics): the files of processes gone since the last run are removed at the start
# (their counts restart from zero, which Prometheus reads as a restart), a running poller's stay.
def on_starting(server):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")
    from django.conf import settings

    from cascade import metrics

    metrics.forget_dead_processes(settings.CASCADE_METRICS_DIR)


def child_exit(server, worker):
    from cascade import metrics

    metrics.worker_exited(worker.pid)
