"""The audit trail: the hash-chained event log, its checks, and secret redaction."""
