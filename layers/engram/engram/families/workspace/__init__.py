"""Workspace family: code files, their dependencies and windows, live sessions (CRDT), decisions and the code
views over them — Agrama's tools."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Job, Services
from engram.kernel.kinds import Kind

if TYPE_CHECKING:
    from engram.families.workspace.collab import CollabService
    from engram.families.workspace.erasing import WorkspaceErasing
    from engram.families.workspace.files import WorkspaceService
    from engram.families.workspace.views import CodeViews

INDEX_JOB = "workspace.index"
DECISION_JOB = "workspace.decision"


class WorkspaceServices(Services):
    @cached_property
    def workspace(self) -> WorkspaceService:
        from engram.families.workspace.files import WorkspaceService

        return WorkspaceService(self.root.kernel)

    @cached_property
    def collab(self) -> CollabService:
        from engram.families.workspace.collab import CollabService

        return CollabService(self.root.kernel, self.workspace)

    @cached_property
    def codeviews(self) -> CodeViews:
        from engram.families.workspace.views import CodeViews

        return CodeViews(self.workspace, self.collab, self.root.clock)

    @cached_property
    def erasing(self) -> WorkspaceErasing:
        from engram.families.workspace.erasing import WorkspaceErasing

        return WorkspaceErasing(self.root.kernel)


FAMILY = Family(
    "workspace",
    WorkspaceServices,
    function="WorkspaceFunction",
    jobs={
        INDEX_JOB: Job(lambda s: s.workspace.index_job, batch=lambda s: s.workspace.index_jobs),
        DECISION_JOB: Job(lambda s: s.collab.decision_job),
    },
    kinds={
        "wfile": Kind("workspace", "scoped", blobs=True),
        "wdep": Kind("workspace", "via", "wfile"),
        "wchunk": Kind("workspace", "via", "wfile", indexed=True),  # a window of a file, in the search index only
        "wsession": Kind("workspace", "scoped"),
        "wop": Kind("workspace", "via", "wsession"),
        "wclock": Kind("workspace", "via", "wsession"),
        "wsnap": Kind("workspace", "via", "wsession"),
        "decision": Kind("workspace", "scoped", indexed=True),
    },
    seeds=("agrama",),
    warm=("get_context", {"context_types": ["project"]}),
    clients=("dynamodb", "opensearch", "sqs", "s3"),
    eraser=lambda s: s.erasing.erase,
    reindexer=lambda s: s.erasing.reindex,
)
