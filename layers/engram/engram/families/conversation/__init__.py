"""Conversation family: threads and messages (Cortex's `thread_*` / `message_*` tools); a message is also a
turn of memory."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Job, Services
from engram.kernel.kinds import Kind

if TYPE_CHECKING:
    from engram.families.conversation.erasing import ConversationErasing
    from engram.families.conversation.service import ConversationService

INDEX_JOB = "conversation.index"


class ConversationServices(Services):
    @cached_property
    def conversation(self) -> ConversationService:
        from engram.families.conversation.service import ConversationService
        from engram.families.memory import MemoryServices

        return ConversationService(self.root.kernel, self.root.services(MemoryServices).memory)

    @cached_property
    def erasing(self) -> ConversationErasing:
        from engram.families.conversation.erasing import ConversationErasing

        return ConversationErasing(self.root.kernel)


FAMILY = Family(
    "conversation",
    ConversationServices,
    function="ConversationFunction",
    jobs={INDEX_JOB: Job(lambda s: s.conversation.index_job)},
    kinds={
        "thread": Kind("conversation", "scoped"),
        "message": Kind("conversation", "scoped", indexed=True),
    },
    seeds=("cortex",),
    warm=("conversation_search", {"query": "warm up"}),
    eraser=lambda s: s.erasing.erase,
    reindexer=lambda s: s.erasing.reindex,
)
