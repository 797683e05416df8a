"""Who is acting: the worker identity written as lease owner and event actor."""

from __future__ import annotations

import os
import socket
import threading


def worker_identity() -> str:
    """host:pid, plus the thread for threads other than the main one."""
    ident = f"{socket.gethostname()}:{os.getpid()}"
    if threading.current_thread() is not threading.main_thread():
        ident += f":{threading.get_ident()}"
    return ident
