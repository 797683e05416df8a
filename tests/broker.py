"""What waits in the test broker (Redis): the tasks sent and not yet taken by any worker."""

from __future__ import annotations

import json
from typing import Any

import redis
from django.conf import settings


def task_queued(name: str, run_id: Any, queue: str = "celery") -> bool:
    """Whether a `name` task for this run waits in the queue."""
    for message in redis.Redis.from_url(settings.REDIS_URL).lrange(queue, 0, -1):
        headers = json.loads(message)["headers"]
        if headers["task"] == name and str(run_id) in headers["argsrepr"]:
            return True
    return False
