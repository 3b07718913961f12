"""What Engram promises about who may do what and what happened: keys and tokens (`identity`, `oauth`, `jws`),
signatures and receipts (`signing`, `receipts`), the hash-chained audit (`audit`), erasure (`erasure`), quotas
and the fair share between contexts (`quotas`, `fair`). Above the kernel and the search rules; below the
families."""
