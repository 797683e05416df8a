# Keeper's image: one image for web (gunicorn), worker and beat (Celery), and the migrate job.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=config.settings.production \
    KEEPER_DATA_DIR=/data

WORKDIR /app

# The project is installed (its dependencies with it) and also run from /app: settings find the
# templates/ and static/ folders next to the code (BASE_DIR).
COPY . /app
RUN pip install . \
    && useradd --system --uid 10001 --user-group --home-dir /app --no-create-home keeper \
    && mkdir -p /data/artifacts \
    && chown -R keeper:keeper /data

# Hashed, compressed static files for whitenoise. Production settings refuse to load without these
# variables; the values below exist only for this build step and are not in the final environment.
RUN SECRET_KEY=collectstatic-at-build-time-is-not-a-secret-0000 \
    ALLOWED_HOSTS=build.invalid \
    DATABASE_URL=postgresql://build@build.invalid/build \
    REDIS_URL=redis://build.invalid:6379/0 \
    python manage.py collectstatic --noinput

USER keeper
EXPOSE 8000

HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://localhost:8000/healthz', timeout=4)"]

CMD ["gunicorn", "config.wsgi", "-c", "config/gunicorn.py"]
