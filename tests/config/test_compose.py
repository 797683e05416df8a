"""The production shape: docker-compose.yml is valid for Compose and wires what production needs;
the Dockerfile starts modules that exist."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.processes import ROOT

APP_SERVICES = ("web", "worker", "beat")


@pytest.fixture(scope="module")
def compose() -> dict:
    binary = shutil.which("docker-compose")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is not installed (apt-get install -y docker-compose)")
        pytest.skip("docker-compose is not installed (apt-get install -y docker-compose)")
    yaml = pytest.importorskip("yaml")
    # Compose v1 (Debian's docker-compose) and v2 both print the resolved file as YAML.
    result = subprocess.run(
        [binary, "--env-file", ".env.example", "-f", "docker-compose.yml", "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_has_every_service_with_its_health_check(compose):
    services = compose["services"]
    assert set(services) >= {
        "postgres",
        "pgbouncer",
        "redis",
        "minio",
        "minio-bucket",
        "migrate",
        "web",
        "worker",
        "beat",
    }
    assert services["postgres"]["image"] == "pgvector/pgvector:pg17"
    assert services["redis"]["image"] == "redis:7"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "redis-cli ping" in " ".join(services["redis"]["healthcheck"]["test"])
    assert "/healthz" in " ".join(services["web"]["healthcheck"]["test"])
    assert "config.wsgi" in services["web"]["command"] and "gunicorn" in services["web"]["command"]
    assert "workers worker" in " ".join(services["worker"]["command"])
    assert services["beat"]["command"][:4] == ["celery", "-A", "workers", "beat"]
    assert services["migrate"]["command"][-3:-1] == ["manage.py", "migrate"]


def test_app_services_wait_for_migrations_and_healthy_stores(compose):
    services = compose["services"]
    for name in APP_SERVICES:
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["redis"]["condition"] == "service_healthy", name
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_only_migrate_gets_the_owner_role(compose):
    services = compose["services"]
    assert services["migrate"]["environment"]["DATABASE_OWNER_URL"].startswith("postgresql://keeper_owner:")
    for name in APP_SERVICES:
        env = services[name]["environment"]
        assert "DATABASE_OWNER_URL" not in env, name
        assert env["DATABASE_URL"].startswith("postgresql://keeper:"), name
        assert env["DJANGO_SETTINGS_MODULE"] == "config.settings.production", name


def test_the_application_reaches_postgresql_through_pgbouncer_in_transaction_mode(compose):
    """web, worker and beat through PgBouncer (transaction pooling, SCRAM, the application role's
    password); the migrations straight to PostgreSQL."""
    services = compose["services"]
    bouncer = services["pgbouncer"]
    assert bouncer["image"].startswith("edoburu/pgbouncer:")
    env = bouncer["environment"]
    assert (env["POOL_MODE"], env["AUTH_TYPE"]) == ("transaction", "scram-sha-256")
    assert (env["DB_HOST"], env["DB_NAME"], env["DB_USER"]) == ("postgres", "keeper", "keeper")
    assert env["DB_PASSWORD"] == "CHANGE-ME-app" and int(env["DEFAULT_POOL_SIZE"]) > 0
    assert bouncer["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "pg_isready" in " ".join(bouncer["healthcheck"]["test"])
    for name in APP_SERVICES:
        app = services[name]
        assert (
            app["environment"]["DATABASE_URL"] == "postgresql://keeper:CHANGE-ME-app@pgbouncer:5432/keeper"
        ), name
        assert app["environment"]["KEEPER_DB_POOLER"] == "transaction", name
        assert app["depends_on"]["pgbouncer"]["condition"] == "service_healthy", name
    migrate = services["migrate"]["environment"]
    assert "@postgres:5432/" in migrate["DATABASE_URL"] and "@postgres:5432/" in migrate["DATABASE_OWNER_URL"]
    assert migrate["KEEPER_DB_POOLER"] == "none"


def test_app_services_keep_their_artifacts_in_the_s3_service(compose):
    services = compose["services"]
    assert services["minio"]["image"].startswith("minio/minio")
    assert "mc ready local" in " ".join(services["minio"]["healthcheck"]["test"])
    bucket_job = " ".join(services["minio-bucket"]["entrypoint"])
    assert "mc mb --ignore-existing" in bucket_job and services["minio-bucket"]["restart"] == "no"
    assert services["minio-bucket"]["depends_on"]["minio"]["condition"] == "service_healthy"
    for name in (*APP_SERVICES, "migrate"):
        env = services[name]["environment"]
        assert env["KEEPER_ARTIFACT_STORE"] == "s3", name
        assert env["KEEPER_ARTIFACT_S3_ENDPOINT_URL"] == "http://minio:9000", name
        assert (
            env["KEEPER_ARTIFACT_S3_BUCKET"]
            == services["minio-bucket"]["environment"]["KEEPER_ARTIFACT_S3_BUCKET"]
        )
        assert env["AWS_ACCESS_KEY_ID"] == services["minio"]["environment"]["MINIO_ROOT_USER"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == services["minio"]["environment"]["MINIO_ROOT_PASSWORD"], name
        assert services[name]["depends_on"]["minio-bucket"]["condition"] == "service_completed_successfully"
    assert "minio-data" in compose["volumes"]


def test_named_volumes_and_the_role_script(compose):
    assert set(compose["volumes"]) >= {"postgres-data", "redis-data", "artifacts"}
    mounts = " ".join(str(v) for v in compose["services"]["postgres"]["volumes"])
    assert "postgres-init.sh" in mounts and "/docker-entrypoint-initdb.d/" in mounts
    script = (ROOT / "deploy" / "postgres-init.sh").read_text()
    assert "CREATE ROLE keeper_owner" in script
    assert re.search(r"CREATE ROLE keeper LOGIN .*NOSUPERUSER NOBYPASSRLS", script)
    assert "CREATE EXTENSION IF NOT EXISTS vector" in script


def test_env_example_holds_no_real_secret():
    values = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    for name in (
        "SECRET_KEY",
        "KEEPER_DIGEST_KEY",
        "POSTGRES_PASSWORD",
        "KEEPER_OWNER_PASSWORD",
        "KEEPER_APP_PASSWORD",
        "MINIO_ROOT_PASSWORD",
    ):
        assert "CHANGE-ME" in values[name], name
    assert ".env" in (ROOT / ".dockerignore").read_text().split()


def test_dockerfile_commands_reference_modules_that_exist():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.M), "the image must not run as root"
    assert "pip install ." in dockerfile and "collectstatic --noinput" in dockerfile
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    assert cmd[0] == "gunicorn"
    wsgi = importlib.import_module(cmd[1])
    assert callable(wsgi.application)
    settings_module = re.search(r"DJANGO_SETTINGS_MODULE=(\S+)", dockerfile).group(1)
    assert importlib.util.find_spec(settings_module) is not None
    assert importlib.util.find_spec("workers.celery") is not None
    assert Path(ROOT / "manage.py").exists()


@pytest.mark.slow
def test_the_postgres_init_script_creates_the_two_roles_that_migrate_and_serve(tmp_path):
    """deploy/postgres-init.sh on a fresh server (the embedded one stands in for the container's):
    the owner can migrate, the application role can use the tables but owns nothing and bypasses
    no row-level security."""
    import tempfile

    import psycopg

    from config.embedded import _import_pgserver

    pgserver, _ = _import_pgserver()
    pgroot = Path(tempfile.mkdtemp(prefix="keeper-init-"))
    server = pgserver.get_server(pgroot / "pg", cleanup_mode=None)
    try:
        socket_dir = str(server.get_postmaster_info().socket_dir)
        env = {
            **os.environ,
            "PATH": f"{server.bin_path}:{os.environ.get('PATH', '')}",
            "PGHOST": socket_dir,
            "POSTGRES_USER": "postgres",
            "KEEPER_OWNER_PASSWORD": "owner-pw",
            "KEEPER_APP_PASSWORD": "app-pw",
        }
        script = subprocess.run(
            ["sh", str(ROOT / "deploy" / "postgres-init.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert script.returncode == 0, script.stderr

        app_url = f"postgresql://keeper@/keeper?host={socket_dir}"
        owner_url = f"postgresql://keeper_owner@/keeper?host={socket_dir}"
        migrate_env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": app_url,
            "DATABASE_OWNER_URL": owner_url,
        }
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=migrate_env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert migrate.returncode == 0, migrate.stderr[-3000:]

        with psycopg.connect(app_url) as conn:
            flags = conn.execute(
                "SELECT rolsuper, rolbypassrls, rolcreatedb FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
            assert flags == (False, False, False)
            conn.execute("SELECT count(*) FROM agent_runs").fetchone()
            owners = conn.execute(
                "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
            assert owners == [("keeper_owner",)]
            assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    finally:
        server.stop()
        shutil.rmtree(pgroot, ignore_errors=True)


def test_gunicorn_writes_json_lines(capsys, monkeypatch):
    import logging.config
    import runpy

    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "config.settings.production")  # as the image sets it
    monkeypatch.delenv("KEEPER_LOG_FORMAT", raising=False)
    config = runpy.run_path(str(ROOT / "config" / "gunicorn.py"))
    assert config["bind"] == "0.0.0.0:8000" and config["accesslog"] == "-"
    logging.config.dictConfig(config["logconfig_dict"])
    logging.getLogger("gunicorn.access").info('10.0.0.1 "GET /healthz HTTP/1.1" 200 15 bytes 2 ms')
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["logger"] == "gunicorn.access" and line["message"].endswith("200 15 bytes 2 ms")


def test_gunicorn_itself_reads_the_image_command(monkeypatch):
    from gunicorn.app.wsgiapp import WSGIApplication

    monkeypatch.chdir(ROOT)
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    monkeypatch.setattr("sys.argv", cmd)
    app = WSGIApplication.__new__(WSGIApplication)  # parse the command line and config, load no app
    app.usage = app.prog = app.callable = app.cfg = app.logger = None
    app.do_load_config()
    assert app.cfg.bind == ["0.0.0.0:8000"] and app.cfg.accesslog == "-"
    assert app.cfg.logconfig_dict["formatters"]["json"]["()"] == "core.logging.JSONFormatter"


def test_gunicorn_sets_up_its_logging_and_keeps_query_values_out(monkeypatch, capsys):
    """gunicorn's own logging set-up (its defaults merged with our dict), then an access line."""
    from datetime import timedelta
    from types import SimpleNamespace

    from django.conf import settings
    from django.utils.log import configure_logging
    from gunicorn.app.wsgiapp import WSGIApplication

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("KEEPER_LOG_FORMAT", "json")  # the image's default
    monkeypatch.setattr("sys.argv", ["gunicorn", "config.wsgi", "-c", "config/gunicorn.py"])
    app = WSGIApplication.__new__(WSGIApplication)
    app.usage = app.prog = app.callable = app.cfg = app.logger = None
    app.do_load_config()
    assert app.cfg.worker_class_str == "gthread" and app.cfg.threads >= 1  # bounded threads per process
    try:
        logger = app.cfg.logger_class(app.cfg)  # was: "Unable to configure root logger", no web at all
        environ = {
            "REQUEST_METHOD": "GET",
            "RAW_URI": "/api/v1/memory/items/?subject_id=cust-1&tenant=acme",
            "PATH_INFO": "/api/v1/memory/items/",
            "QUERY_STRING": "subject_id=cust-1&tenant=acme",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "10.0.0.1",
        }
        response = SimpleNamespace(status="200 OK", response_length=15, headers=[], sent=15)
        request = SimpleNamespace(headers=[])
        logger.access(response, request, environ, timedelta(milliseconds=2))
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert line["logger"] == "gunicorn.access"
        assert '"GET /api/v1/memory/items/?subject_id=*&tenant=* HTTP/1.1" 200' in line["message"]
        assert "cust-1" not in line["message"]
    finally:
        configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)


def test_gunicorn_follows_the_log_settings(monkeypatch):
    """Under `make run` (local settings) gunicorn's lines are plain like the application's, and
    KEEPER_LOG_LEVEL=WARNING silences its access lines too."""
    import runpy

    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "config.settings.local")
    monkeypatch.delenv("KEEPER_LOG_FORMAT", raising=False)
    monkeypatch.setenv("KEEPER_LOG_LEVEL", "WARNING")
    config = runpy.run_path(str(ROOT / "config" / "gunicorn.py"))["logconfig_dict"]
    assert config["handlers"]["stderr"]["formatter"] == "plain"
    assert config["loggers"]["gunicorn.access"]["level"] == "WARNING"


def test_gunicorn_opens_no_control_socket_another_instance_could_remove():
    import runpy

    config = runpy.run_path(str(ROOT / "config" / "gunicorn.py"))
    assert config["control_socket_disable"] is True
