"""The local-folder backend (`make run`'s default): one file per blob under KEEPER_ARTIFACT_ROOT.

It opens nothing but regular files inside its own root: every folder below the root is opened with
O_NOFOLLOW relative to the one above it (a link anywhere below the root is refused, not followed),
the file itself with O_NOFOLLOW | O_NONBLOCK (a FIFO cannot block the open) and checked with fstat
before a byte is read (a FIFO, a device or a socket is refused), and reads stop past the limit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from pathlib import Path

from core.artifacts.errors import ArtifactMissing, ArtifactRefused, ArtifactTooLarge
from core.artifacts.store import ArtifactStore, key_check

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_LINKED = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)
_TENANT_PREFIX = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/")
_HEX = re.compile(r"[0-9a-f]{64}")
CHUNK = 1024 * 1024


class LocalArtifactStore(ArtifactStore):
    name = "local"

    def __init__(self, *, root: str) -> None:
        # The root itself may be a link (a deployment's mount point); nothing below it is followed.
        self.root = Path(root)

    def _folder(self, parts: list[str], *, create: bool) -> int:
        """A descriptor of the key's folder, each step opened relative to the last without following."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                try:
                    below = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o750, dir_fd=fd)
                    below = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = below
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_folder(self, key: str, *, create: bool = False) -> tuple[int, str]:
        parts = key_check(key).split("/")
        try:
            return self._folder(parts[:-1], create=create), parts[-1]
        except FileNotFoundError:
            raise ArtifactMissing(f"artifact {parts[-1][:12]}… is not in the store") from None
        except OSError as exc:
            if exc.errno in _LINKED:
                raise ArtifactRefused(
                    "the artifact store holds a link or a file where a folder belongs; nothing was read"
                ) from None
            raise

    def write(self, key: str, data: bytes) -> None:
        folder, name = self._open_folder(key, create=True)
        try:
            temporary = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            fd = os.open(
                temporary,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o640,
                dir_fd=folder,
            )
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            # Atomic: a reader sees the old file, or none, or all of the new one.
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        finally:
            os.close(folder)

    def read(self, key: str, *, limit: int) -> bytes:
        folder, name = self._open_folder(key)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            raise ArtifactMissing(f"artifact {name[:12]}… is not in the store") from None
        except OSError as exc:
            if exc.errno in _LINKED:
                raise ArtifactRefused(
                    "the artifact store holds a link where a blob belongs; not followed"
                ) from None
            raise
        finally:
            os.close(folder)
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                raise ArtifactRefused(
                    "the artifact store holds something other than a regular file there; not read"
                )
            if found.st_size > limit:
                raise ArtifactTooLarge(f"the stored blob is {found.st_size} bytes, over the {limit} expected")
            chunks: list[bytes] = []
            total = 0
            while chunk := os.read(fd, min(CHUNK, limit + 1 - total)):
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:  # it grew since fstat
                    raise ArtifactTooLarge(f"the stored blob is over the {limit} bytes expected")
            return b"".join(chunks)
        finally:
            os.close(fd)

    def exists(self, key: str) -> bool:
        try:
            folder, name = self._open_folder(key)
        except (ArtifactMissing, ArtifactRefused):
            return False
        try:
            found = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return False
        finally:
            os.close(folder)
        return stat.S_ISREG(found.st_mode)

    def delete(self, key: str) -> bool:
        try:
            folder, name = self._open_folder(key)
        except ArtifactMissing:
            return False
        try:
            os.unlink(name, dir_fd=folder)  # a link is removed, never its target
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(folder)

    def keys_under(self, prefix: str, *, limit: int = 100_000) -> list[str]:
        if not _TENANT_PREFIX.fullmatch(prefix):
            raise ValueError(f"not a tenant's prefix: {prefix[:60]!r}")
        top = self.root / prefix.rstrip("/")
        if top.is_symlink() or not top.is_dir():
            return []
        keys: list[str] = []
        with os.scandir(top) as folders:
            for folder in folders:
                if not folder.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(folder.path) as files:
                    for entry in files:
                        if _HEX.fullmatch(entry.name) and not entry.is_dir(follow_symlinks=False):
                            keys.append(f"{prefix}{folder.name}/{entry.name}")
                            if len(keys) >= limit:
                                return keys
        return keys
