"""What the end-to-end tests of served processes on one data folder share: a folder with an agent's key for context
`CTX`, and a REST client of that context."""

from __future__ import annotations

from pathlib import Path

import httpx

from engram.cli.devserver import cli

CTX = "acme"


def keyed_folder(folder: Path) -> tuple[Path, str]:
    """`folder` with a key of context `CTX` (granted `org/acme`): the folder and the key."""
    out = cli("keys", "create", "--context", CTX, "--principal", "agent", "--grant", "org/acme", data_dir=folder)
    return folder, out.strip().splitlines()[-1]


def api(url: str, key: str, timeout: float = 30) -> httpx.Client:
    return httpx.Client(base_url=f"{url}/api/v1/{CTX}", headers={"Authorization": f"Bearer {key}"}, timeout=timeout)
