"""The `engram` command line: `main` (the parser, `serve`, `stdio`, keys, ingest, admin), `governance` (audit,
erasure, OAuth issuers, quotas, usage), `transfer` (export, import, backup, restore), `common` (what they share),
`process` (how a serving process sets itself up) and `devserver` (starting `engram serve` from tests and benches).
`python -m engram.cli` runs it."""
