"""BlobStore on S3: one bucket, keys under an optional prefix, presigned download URLs."""

from __future__ import annotations

from typing import Any

from engram.errors import NotFound


class S3BlobStore:
    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self._s3 = client
        self._bucket = bucket
        self._prefix = prefix

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
                self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": doomed, "Quiet": True})
            if not page.get("IsTruncated"):
                break
            kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
        self._s3.delete_object(Bucket=self._bucket, Key=name)  # an unversioned bucket lists no versions

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
