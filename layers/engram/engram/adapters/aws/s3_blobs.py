"""BlobStore on S3: one bucket, keys under an optional prefix, presigned download URLs."""

from __future__ import annotations

import time
from typing import Any

from engram.kernel.errors import NotFound

TRIES = 4
TRANSIENT = {"InternalError", "SlowDown", "ServiceUnavailable", "RequestTimeout"}


class BlobsKept(RuntimeError):
    """S3 refused to delete versions: not a caller's error, so a job that meets it is tried again (a legal hold
    lifted, a busy partition), and the erasure request says why it has not finished (`last_error`)."""


class S3BlobStore:
    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self._s3 = client
        self._bucket = bucket
        self._prefix = prefix
        self._versioning: str | None = None  # the bucket's versioning status, read on the first erasure

    def _key(self, key: str) -> str:
        return self._prefix + key

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self._s3.put_object(Bucket=self._bucket, Key=self._key(key), Body=data, ContentType=content_type)

    def get(self, key: str) -> bytes:
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=self._key(key))["Body"].read()
        except self._s3.exceptions.NoSuchKey as exc:
            raise NotFound(f"blob {key!r} not found") from exc
        return body

    def delete(self, key: str) -> None:
        self._s3.delete_object(Bucket=self._bucket, Key=self._key(key))

    def erase(self, key: str) -> None:
        """Every version and delete marker of the key (a versioned bucket keeps old versions after a delete)."""
        name = self._key(key)
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": name}
        while True:
            page = self._s3.list_object_versions(**kwargs)
            found = [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
            doomed = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in found if v["Key"] == name]
            if doomed:
                self._delete_versions(doomed)
            if not page.get("IsTruncated"):
                break
            kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
        if not self._versioned():  # a store that lists no versions there: the key itself
            self._s3.delete_object(Bucket=self._bucket, Key=name)

    def _versioned(self) -> bool:
        """Whether the bucket keeps versions (or did: suspended). There a delete of a key adds a delete marker,
        even of a key that is gone, so an erasure that ended with one left a marker under the erased key (found
        on LocalStack, #51: moto adds none)."""
        if self._versioning is None:
            self._versioning = self._s3.get_bucket_versioning(Bucket=self._bucket).get("Status", "")
        return bool(self._versioning)

    def _delete_versions(self, doomed: list[dict[str, str]]) -> None:
        """A batch of versions deleted, or an error that says which were kept: S3 answers a batch delete with 200
        and lists what it refused (a version under object lock or legal hold, a busy partition), and an erasure
        that read that 200 as done signed a receipt for bytes still stored."""
        for attempt in range(TRIES):
            answer = self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": doomed, "Quiet": True})
            refused = answer.get("Errors") or []
            if not refused:
                return
            if any(e.get("Code") not in TRANSIENT for e in refused) or attempt == TRIES - 1:
                first = refused[0]
                raise BlobsKept(f"S3 kept {len(refused)} version(s) of {first.get('Key')!r}: {first.get('Code')} "
                                f"({first.get('Message')})")  # fmt: skip
            time.sleep(0.1 * 2**attempt)  # deleting what is gone already is a success: the batch is sent again

    def exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self._bucket, Key=self._key(key))
        except self._s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def url(self, key: str, expires_in: int = 3600) -> str | None:
        url: str = self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": self._bucket, "Key": self._key(key)}, ExpiresIn=expires_in
        )
        return url
