"""Entities family: the knowledge graph every family's writes feed (extraction jobs), and Cortex's `entity_*`
tools over it."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Job, Services
from engram.kernel.kinds import Kind

if TYPE_CHECKING:
    from engram.families.entities.erasing import EntityErasing
    from engram.families.entities.graph import GraphService
    from engram.families.entities.service import EntityService

INDEX_JOB = "entities.index"
GRAPH_JOB = "graph.extract"


class EntitiesServices(Services):
    @cached_property
    def entities(self) -> EntityService:
        from engram.families.entities.service import EntityService

        return EntityService(self.root.kernel)

    @cached_property
    def erasing(self) -> EntityErasing:
        from engram.families.entities.erasing import EntityErasing

        return EntityErasing(self.root.kernel)

    @cached_property
    def graph(self) -> GraphService:
        from engram.families.entities.graph import GraphService

        return GraphService(self.root.kernel)


FAMILY = Family(
    "entities",
    EntitiesServices,
    function="EntitiesFunction",
    jobs={INDEX_JOB: Job(lambda s: s.entities.index_job), GRAPH_JOB: Job(lambda s: s.graph.extract_job, passable=True)},
    kinds={
        "entity": Kind("entities", "scoped", indexed=True, shared=True),
        "relation": Kind("entities", "scoped", shared=True),
        "ealias": Kind("entities", "via", "entity"),
        "gmention": Kind("entities", "via", "entity"),  # a source's mention, counted on its entity
        "grelev": Kind("entities", "via", "relation"),  # a source's evidence, counted on its edge
        "gsource": Kind("entities", "system"),  # what a source said last (the graph job compares with it)
    },
    seeds=("cortex",),
    warm=("entity_list", {}),
    clients=("dynamodb", "opensearch"),
    eraser=lambda s: s.erasing.erase,
    reindexer=lambda s: s.erasing.reindex,
)
