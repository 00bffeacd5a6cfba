"""Shares and labels the read models compute: check rates over checked outputs."""

from __future__ import annotations


def share(count: int, total: int) -> float | None:
    """count / total, or None when there is nothing to divide by."""
    return count / total if total else None


def version_label(name: str | None, semver: str | None, version_id: str) -> str:
    """`name@semver`, or the version id's first 19 characters when it has no name."""
    return f"{name}@{semver}" if name and semver else version_id[:19]


class CheckRates:
    """Output-check rates as shares of the checked outputs (None when none was checked).

    Shared by the records that carry the check counts (VariantSummary, MetricsRow).
    """

    checked: int
    valid: int
    repaired: int
    invalid: int
    truncated: int
    rule_failed: int

    def _share(self, count: int) -> float | None:
        return share(count, self.checked)

    @property
    def validity_rate(self) -> float | None:
        """Valid as written, of the checked outputs."""
        return self._share(self.valid)

    @property
    def repair_rate(self) -> float | None:
        """Fit the schema only once repaired, of the checked outputs."""
        return self._share(self.repaired)

    @property
    def invalid_rate(self) -> float | None:
        return self._share(self.invalid)

    @property
    def truncation_rate(self) -> float | None:
        """Cut off at the token limit, of the checked outputs."""
        return self._share(self.truncated)

    @property
    def rule_failure_rate(self) -> float | None:
        """Failed an error-severity rule, of the checked outputs."""
        return self._share(self.rule_failed)
