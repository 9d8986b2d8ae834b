"""Writes the seeded fake billing data under ``config/billing/`` (deterministic).

Identifiers are dense on purpose: whole blocks of account numbers exist
(ACC-4729-18, ACC-4729-19 and ACC-4728-18 are three different customers), invoice
numbers run in one sequence, and order numbers share prefixes. A one-character
slip in a remembered identifier therefore lands on another real record, which
is exactly the failure the ID guard is there to stop.

Usage: ``python scripts/seed_billing.py [output_dir]``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent.parent / "config" / "billing"
SEED = 20261130
MONTHS = (("2026-09", "2026-09-05"), ("2026-10", "2026-10-05"), ("2026-11", "2026-11-05"))
ACCOUNT_BLOCKS = (((4725, 4733), (12, 24)), ((3316, 3319), (49, 55)), ((6049, 6052), (4, 10)))
FIRST = ("Dana", "Priya", "Tomás", "Aoife", "Kwame", "Lena", "Marco", "Yuki", "Sam", "Noor", "Ines", "Olu")
LAST = ("Whitfield", "Raman", "Okafor", "Brennan", "Castillo", "Novak", "Haddad", "Lindqvist", "Mwangi", "Sato")
PLANS = {"Broadband 100": 45.0, "Broadband 500": 59.0, "Fibre 1000": 72.0}
ADDONS = {"CloudVault Pro": 19.99, "StreamBox Plus": 12.5, "Landline Unlimited": 9.0, "Router Care": 4.5}
SHOP = {"Electric Kettle": 49.0, "Wireless Headphones": 89.0, "Smart Plug Twin Pack": 24.0, "Mesh Extender": 79.0}
ORDER_PREFIXES = ("7K4M", "7K4N", "7K3M", "9TQ2", "9TQ3", "3HX8")

# Records the scenarios in config/scenarios/ depend on: pinned, never regenerated differently.
PINNED_ACCOUNTS: dict[str, dict[str, Any]] = {
    "ACC-4729-18": {"name": "Dana Whitfield", "plan": "Broadband 100", "statement_day": 5},
    "ACC-3318-52": {"name": "Priya Raman", "plan": "Fibre 1000", "statement_day": 5},
    "ACC-6051-07": {"name": "Kwame Okafor", "plan": "Broadband 500", "statement_day": 5},
}
PINNED_INVOICES: dict[str, list[tuple[str, str, list[tuple[str, float, str | None]]]]] = {
    "ACC-4729-18": [
        ("INV-2026-0981", "2026-09", [("Broadband 100", 45.0, None), ("CloudVault Pro", 19.99, None)]),
        (
            "INV-2026-1018", "2026-10",
            [("Broadband 100", 45.0, None), ("CloudVault Pro", 19.99, None), ("CloudVault Pro", 19.99, None)],
        ),
        ("INV-2026-1102", "2026-11", [("Broadband 100", 45.0, None), ("CloudVault Pro", 19.99, None)]),
    ],
    "ACC-3318-52": [
        ("INV-2026-0952", "2026-09", [("Fibre 1000", 72.0, None)]),
        (
            "INV-2026-0871", "2026-10",
            [
                ("Fibre 1000", 72.0, None),
                ("Wireless Headphones", 89.0, "ORD-7K4M2R"),
                ("Wireless Headphones", 89.0, "ORD-7K4M2R"),
            ],
        ),
        (
            "INV-2026-1143", "2026-11",
            [
                ("Fibre 1000", 72.0, None),
                ("Electric Kettle", 49.0, "ORD-7K4M2P"),
                ("Mesh Extender", 79.0, "ORD-9TQ2XB"),
            ],
        ),
    ],
    "ACC-6051-07": [
        ("INV-2026-0967", "2026-09", [("Broadband 500", 59.0, None)]),
        ("INV-2026-1055", "2026-10", [("Broadband 500", 59.0, None)]),
        ("INV-2026-1207", "2026-11", [("Broadband 500", 59.0, None), ("Late payment fee", 12.0, None)]),
    ],
}
# Near neighbours of the scenario orders that belong to other customers.
NEIGHBOUR_ORDERS = ("ORD-7K4M2Q", "ORD-7K4N2P", "ORD-7K4M3P", "ORD-7K4M2S", "ORD-9TQ2XC", "ORD-9TQ3XB")


def _account_ids() -> list[str]:
    ids = [
        f"ACC-{block:04d}-{suffix:02d}"
        for (b_lo, b_hi), (s_lo, s_hi) in ACCOUNT_BLOCKS
        for block in range(b_lo, b_hi + 1)
        for suffix in range(s_lo, s_hi + 1)
    ]
    return sorted(set(ids) | set(PINNED_ACCOUNTS))


def _order_pool(rng: random.Random, taken: set[str]) -> list[str]:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    pool = [o for o in NEIGHBOUR_ORDERS if o not in taken]
    while len(pool) < 400:
        candidate = f"ORD-{rng.choice(ORDER_PREFIXES)}{rng.choice(alphabet)}{rng.choice(alphabet)}"
        if candidate not in taken and candidate not in pool:
            pool.append(candidate)
    return pool


def _invoice(invoice_id: str, account_id: str, month: str, issued: str, lines: list[dict[str, Any]]) -> dict[str, Any]:
    total = round(sum(line["amount"] for line in lines), 2)
    status = "open" if month == MONTHS[-1][0] else "paid"
    due = issued[:8] + "25"
    return {
        "invoice_id": invoice_id, "account_id": account_id, "month": month, "issued": issued,
        "due": due, "total": total, "status": status, "lines": lines,
    }


def build(rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Builds accounts, invoices and orders.

    Args:
        rng: The seeded random source; the same seed gives byte-identical output.

    Returns:
        ``{"accounts": [...], "invoices": [...], "orders": [...]}``.
    """
    accounts: list[dict[str, Any]] = []
    invoices: list[dict[str, Any]] = []
    orders: list[dict[str, Any]] = []
    pinned_numbers = {inv_id for invs in PINNED_INVOICES.values() for inv_id, _, _ in invs}
    pinned_orders = {o for invs in PINNED_INVOICES.values() for _, _, lines in invs for _, _, o in lines if o}
    order_pool = _order_pool(rng, pinned_orders)
    next_number = 900

    def new_invoice_id() -> str:
        nonlocal next_number
        while f"INV-2026-{next_number:04d}" in pinned_numbers:
            next_number += 1
        next_number += 1
        return f"INV-2026-{next_number - 1:04d}"

    for account_id in _account_ids():
        pinned = PINNED_ACCOUNTS.get(account_id)
        name = pinned["name"] if pinned else f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        plan = pinned["plan"] if pinned else rng.choice(sorted(PLANS))
        accounts.append({
            "account_id": account_id, "name": name, "plan": plan, "status": "active",
            "statement_day": 5, "payment_method": rng.choice(("direct_debit", "card")),
        })
        if account_id in PINNED_INVOICES:
            specs = [(inv_id, month, list(lines)) for inv_id, month, lines in PINNED_INVOICES[account_id]]
        else:
            addon = rng.choice([*sorted(ADDONS), None])
            specs = []
            for month, _ in MONTHS:
                lines_spec: list[tuple[str, float, str | None]] = [(plan, PLANS[plan], None)]
                if addon:
                    lines_spec.append((addon, ADDONS[addon], None))
                if rng.random() < 0.3 and order_pool:
                    item = rng.choice(sorted(SHOP))
                    lines_spec.append((item, SHOP[item], order_pool.pop(0)))
                specs.append((new_invoice_id(), month, lines_spec))
        issued_by_month = dict(MONTHS)
        for inv_id, month, lines_spec in specs:
            lines = []
            for n, (description, amount, order_id) in enumerate(lines_spec, start=1):
                line: dict[str, Any] = {"line_id": f"L{n}", "description": description, "amount": amount}
                if order_id:
                    line["order_id"] = order_id
                lines.append(line)
            invoices.append(_invoice(inv_id, account_id, month, issued_by_month[month], lines))
            seen: set[str] = set()
            for line in lines:
                order_id = line.get("order_id")
                if order_id and order_id not in seen:
                    seen.add(order_id)
                    orders.append({
                        "order_id": order_id, "account_id": account_id, "invoice_id": inv_id,
                        "description": line["description"], "amount": line["amount"],
                        "status": "delivered", "placed": issued_by_month[month][:8] + "01",
                    })
    return {"accounts": accounts, "invoices": invoices, "orders": orders}


def write(out_dir: Path) -> list[Path]:
    """Writes one JSON file per record kind, one record per line (diff-friendly, compact).

    Args:
        out_dir: Target directory, created if missing.

    Returns:
        The files written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    data = build(random.Random(SEED))
    paths = []
    for kind, records in data.items():
        body = ",\n".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records)
        path = out_dir / f"{kind}.json"
        path.write_text("[\n" + body + "\n]\n", encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DIR
    for written in write(target):
        print(f"{written}: {written.stat().st_size} bytes")
