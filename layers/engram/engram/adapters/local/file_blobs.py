"""BlobStore on the local file system, under one root; keys never escape it."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from engram.kernel.errors import InvalidInput, NotFound


class FileBlobStore:
    def __init__(self, root: Path | str) -> None:
        self._root = Path(root).resolve()
        self._root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise InvalidInput(f"invalid blob key {key!r}")
        # Hash the key into the file name: keys may hold characters file systems dislike.
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self._root / digest[:2] / digest

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")  # one per writer
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)  # atomic: a reader never sees half a blob
        finally:
            tmp.unlink(missing_ok=True)

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise NotFound(f"blob {key!r} not found") from exc

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def erase(self, key: str) -> None:
        self.delete(key)  # a file has one version

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def url(self, key: str, expires_in: int = 3600) -> str | None:
        return None
