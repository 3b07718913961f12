"""The kernel: what every family and every transport is built on, and nothing above it — the ports (`ports`) the
adapters fill, errors and limits, the clock, scopes and the caller (`scopes`, `caller`), operations (`operation`)
and families (`family`), record kinds (`kinds`), the unit of work and the job queue, opaque ids, the cost of a
call (`metering`), logs and metrics (`observability`), and the services' base (`services`).

Imports go down only: `engram.kernel` imports no other sub-package of engram at run time (tested:
`tests/unit/test_families.py`)."""
