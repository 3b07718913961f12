"""The console's build stamp (#52): the SHA-256 of everything the build reads (`console/`'s sources, config and
lockfile), kept beside the built files as `build.json`. `make console` writes it after building; the tests read it
and fail when the sources changed since the committed build (`python infra/console_stamp.py check`)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "console"
BUILT = ROOT / "layers" / "engram" / "engram" / "console"
INPUTS = ("package.json", "package-lock.json", "vite.config.js", "index.html")


def digest() -> str:
    files = [SOURCE / name for name in INPUTS] + sorted(p for p in (SOURCE / "src").rglob("*") if p.is_file())
    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(SOURCE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def built() -> dict[str, str]:
    stamp = BUILT / "build.json"
    return json.loads(stamp.read_text()) if stamp.exists() else {}


def main(action: str) -> int:
    if action == "write":
        (BUILT / "build.json").write_text(json.dumps({"sources_sha256": digest()}, indent=1) + "\n")
        return 0
    if built().get("sources_sha256") != digest():
        print("the committed console build is older than console/: run `make console` and commit it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "check"))
