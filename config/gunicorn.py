"""gunicorn's settings for the image and `make run` (`gunicorn config.wsgi -c config/gunicorn.py`): its
access and error lines follow KEEPER_LOG_FORMAT and KEEPER_LOG_LEVEL like the application's (JSON by
default under production settings, plain lines otherwise)."""

from __future__ import annotations

import os

from gunicorn.glogging import Logger

from config.env import env_str
from core.logging import PLAIN_FORMAT, path_redact, query_redact, request_line_redact

_production = os.environ.get("DJANGO_SETTINGS_MODULE", "").endswith(".production")
LOG_FORMAT = env_str("KEEPER_LOG_FORMAT", "json" if _production else "plain")
LOG_LEVEL = env_str("KEEPER_LOG_LEVEL", "INFO")

bind = "0.0.0.0:8000"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# Each process serves this many requests at once, each thread with its own database connection: a
# burst of requests queues here instead of opening a PostgreSQL connection per request.
# `GUNICORN_CMD_ARGS="--threads N"` changes it.
worker_class = "gthread"
threads = 4
timeout = 60
# The longest request line gunicorn takes (its default is 4094): a GET search with a long query
# gets gunicorn's own HTML 414 above it, before Keeper can answer in JSON (memory search also takes
# POST for that).
limit_request_line = 8190
# gunicorn 27's control socket lives at one path per user ($HOME/.gunicorn/gunicorn.ctl), shared by
# every instance on the machine, and Keeper does not use it: one `make run` stopping removed another's.
control_socket_disable = True
accesslog = "-"
errorlog = "-"
# The access line's message; the JSON formatter adds time, level and logger around it.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s bytes %(M)s ms'


class AccessLogger(Logger):
    """Access lines name the query's parameters, never their values (subject ids, search text), and
    a subject's id in the path as `*`."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        atoms["r"] = request_line_redact(atoms["r"])
        atoms["U"] = path_redact(atoms["U"])
        atoms["q"] = query_redact(atoms["q"])
        for key in ("{raw_uri}e", "{query_string}e"):  # the environ's copies, should a format use them
            atoms.pop(key, None)
        return atoms


logger_class = AccessLogger
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "core.logging.JSONFormatter"}, "plain": {"format": PLAIN_FORMAT}},
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "stream": "ext://sys.stderr"}
    },
    # gunicorn merges this dict over its defaults one key deep: without a root of our own, the
    # default root names the default "console" handler this dict replaced, and gunicorn exits with
    # "Unable to configure root logger" before serving anything.
    "root": {"level": LOG_LEVEL, "handlers": ["stderr"]},
    "loggers": {
        "gunicorn.error": {"handlers": ["stderr"], "level": LOG_LEVEL, "propagate": False},
        "gunicorn.access": {"handlers": ["stderr"], "level": LOG_LEVEL, "propagate": False},
    },
}
