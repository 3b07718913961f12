"""Identity family: principals, keys and scope paths (Vectros' `principal_*` tools, `scopes_register`). Keys
and scopes themselves are the kernel's (`engram.trust.identity`): every family checks them."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Job, Services
from engram.kernel.kinds import Kind

ERASURE_JOB = "erasure.run"
EXPORT_JOB, IMPORT_JOB = "context.export", "context.import"

if TYPE_CHECKING:
    from engram.families.identity.erasure import ErasureService
    from engram.families.identity.principals import Principals
    from engram.families.identity.subject_access import SubjectAccess
    from engram.families.identity.transfers import Transfers
    from engram.trust.audit import Auditor
    from engram.trust.identity import IdentityService
    from engram.trust.quotas import Quotas


class IdentityServices(Services):
    @property
    def identity(self) -> IdentityService:
        return self.root.identity

    @property
    def audit(self) -> Auditor:
        return self.root.audit

    @property
    def quotas(self) -> Quotas:
        return self.root.quotas

    @cached_property
    def erasure(self) -> ErasureService:
        from engram.families.identity.erasure import ErasureService

        return ErasureService(self.root)

    @cached_property
    def subject_access(self) -> SubjectAccess:
        from engram.families.identity.subject_access import SubjectAccess

        return SubjectAccess(self.root)

    @cached_property
    def transfers(self) -> Transfers:
        from engram.families.identity.transfers import Transfers

        return Transfers(self.root)

    @cached_property
    def principals(self) -> Principals:
        from engram.families.identity.principals import Principals
        from engram.families.records import RecordsServices

        records = self.root.services(RecordsServices)
        return Principals(self.root.identity, records.schemas, records.typed)


FAMILY = Family(
    "identity",
    IdentityServices,
    function="IdentityFunction",
    jobs={
        ERASURE_JOB: Job(lambda s: s.erasure.erasure_job),
        EXPORT_JOB: Job(lambda s: s.transfers.export_job),
        IMPORT_JOB: Job(lambda s: s.transfers.import_job),
    },
    kinds={
        "erasure": Kind("identity", "system"),  # an erasure request, its progress and its signed receipt
        "receiptkey": Kind("identity", "system"),  # the deployment's receipt signing key (context `_system`)
        "auditkey": Kind("identity", "system"),  # the audit chain's HMAC key, without ENGRAM_AUDIT_KEY (`_system`)
        "transfer": Kind("identity", "system"),  # a whole context's export or import run by the worker
    },
    seeds=("vectros",),
    clients=("dynamodb",),
    warm=("current_identity", {}),
)
