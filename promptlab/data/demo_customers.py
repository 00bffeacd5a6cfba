"""The demo's traffic: 400 customers, each writing two of the hand-labelled demo tickets
in their own words, so the demo experiment's first look has units enough for a verdict.

Each row keeps its ticket's hand-made label (`category`) and tier; the words around the
ticket (a greeting, a sign-off with the customer's name and number) make every request
distinct, so the simulated model answers each one on its own draw. Deterministic: the
shipped data/demo/customers.csv is exactly `customer_rows()` (a test checks it).

    .venv/bin/python -m promptlab.data.demo_customers > data/demo/customers.csv
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from promptlab.config import DEMO_DIR

CUSTOMERS = 400
TICKETS_PER_CUSTOMER = 2
COLUMNS = ("ticket_id", "customer_id", "ticket", "customer_tier", "category")
_NAMES = (
    "Dana",
    "Omar",
    "Lena",
    "Ravi",
    "Mia",
    "Tom",
    "Ada",
    "Kofi",
    "Sara",
    "Ivan",
    "Noor",
    "Paul",
    "Yuki",
    "Ben",
    "Ines",
    "Leo",
    "Zara",
    "Hugo",
    "Amy",
    "Raj",
)
_OPENERS = (
    "Hi,",
    "Hello,",
    "Hi team,",
    "Good morning,",
    "Hey there,",
    "Dear support,",
    "Hello again,",
    "Hi folks,",
)
_CLOSERS = ("Thanks, {n}", "Best, {n}", "Cheers, {n}", "Regards, {n}", "Thank you! {n}", "{n}")


def customer_rows(tickets: Path = DEMO_DIR / "tickets.csv") -> list[dict[str, str]]:
    """The customers dataset's rows, from the labelled tickets."""
    with tickets.open(encoding="utf-8", newline="") as f:
        labelled = list(csv.DictReader(f))
    rows: list[dict[str, str]] = []
    for c in range(CUSTOMERS):
        name = _NAMES[c % len(_NAMES)]
        for j in range(TICKETS_PER_CUSTOMER):
            ticket = labelled[(c * 7 + j * 13) % len(labelled)]
            opener = _OPENERS[(c + j) % len(_OPENERS)]
            closer = _CLOSERS[(c * 3 + j) % len(_CLOSERS)].format(n=name)
            rows.append(
                {
                    "ticket_id": f"T-{2001 + len(rows)}",
                    "customer_id": f"C-{1001 + c}",
                    "ticket": f"{opener} {ticket['ticket']} {closer} (customer {1001 + c})",
                    "customer_tier": ticket["customer_tier"],
                    "category": ticket["category"],
                }
            )
    return rows


def customers_csv() -> str:
    """`customer_rows()` as the CSV file the demo ships."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(customer_rows())
    return out.getvalue()


if __name__ == "__main__":
    sys.stdout.write(customers_csv())
