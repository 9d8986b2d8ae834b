"""The handoff card: what a human specialist receives so the caller repeats nothing.

Everything is copied verbatim from the lanes (slots, ledger, summary) and from
the transcript (open tool calls, disputes not yet resolved); nothing is
paraphrased on the way to the human.
"""

from __future__ import annotations

from typing import Any

from voice_agent.core.call_state import CallState
from voice_agent.core.transcript import EntryKind, ToolOutcome

_HANDOFF_TOOL = "transfer_to_human"


def _unresolved_disputes(state: CallState) -> list[dict[str, Any]]:
    """Disputes opened in this call that no later credit resolved, read from tool results."""
    opened: dict[str, dict[str, Any]] = {}
    resolved: set[str] = set()
    for entry in state.transcript:
        if entry.kind is not EntryKind.TOOL_RESULT or entry.outcome is not ToolOutcome.COMPLETED:
            continue
        result = entry.result if isinstance(entry.result, dict) else {}
        if entry.tool_name == "open_dispute" and result.get("dispute_id"):
            opened[str(result["dispute_id"])] = {
                k: result[k] for k in ("dispute_id", "invoice_id", "order_id", "category", "disputed_item")
                if k in result
            }
        elif entry.tool_name == "issue_credit" and result.get("resolves_dispute"):
            resolved.add(str(result["resolves_dispute"]))
    return [d for key, d in opened.items() if key not in resolved]


def handoff_card(state: CallState) -> dict[str, Any]:
    """Builds the handoff card of a call.

    Args:
        state: The call's lanes.

    Returns:
        ``{"call_id", "turn", "slots", "ledger", "summary", "open_items"}``: filled slots
        with value/turn/source, every ledger entry with role/value/verified/source,
        the rendered summary, and open items (tool calls without a result other than
        the transfer itself, the summary's pending lines and commitments, and
        disputes opened in this call that no credit resolved).
    """
    slots = {
        name: {"value": slot.value, "turn": slot.turn, "source": slot.source}
        for name, slot in state.slots.filled().items()
    }
    ledger = [
        {
            "role": e.role, "value": e.value, "verified": e.verified, "source": e.source,
            "first_seen": e.first_seen, "last_used": e.last_used,
        }
        for e in state.ledger.entries
    ]
    pending_calls = [
        {"tool": e.tool_name, "arguments": dict(e.arguments or {}), "turn": e.turn}
        for e in state.transcript.pending_tool_calls()
        if e.tool_name != _HANDOFF_TOOL
    ]
    return {
        "call_id": state.call_id,
        "turn": state.turn,
        "slots": slots,
        "ledger": ledger,
        "summary": state.summary.render(),
        "open_items": {
            "pending_tool_calls": pending_calls,
            "summary_pending": list(state.summary.pending),
            "commitments": [f'turn {c.turn}: "{c.text}"' for c in state.summary.commitments],
            "unresolved_disputes": _unresolved_disputes(state),
        },
    }


def render_handoff_card(card: dict[str, Any]) -> str:
    """Renders a handoff card as plain text for the specialist's screen, values verbatim.

    Args:
        card: A card from :func:`handoff_card` (a ``reason`` key is shown when present).
    """
    lines = [f"HANDOFF for call {card.get('call_id', '?')} at turn {card.get('turn', '?')}"]
    if card.get("reason"):
        lines.append(f"Reason: {card['reason']}")
    lines.append("Slots:")
    for name, slot in card.get("slots", {}).items():
        value = slot["value"]
        shown = "; ".join(map(str, value)) if isinstance(value, list) else str(value)
        lines.append(f"  {name}: {shown} (turn {slot['turn']}, {slot['source']})")
    lines.append("Identifiers:")
    for e in card.get("ledger", []):
        status = "verified" if e["verified"] else "UNVERIFIED"
        lines.append(f"  {e['role']}: {e['value']} ({status}, from {e['source']})")
    summary = card.get("summary") or "(no summary yet)"
    lines.append("Summary:")
    lines.extend(f"  {line}" for line in summary.splitlines())
    open_items = card.get("open_items", {})
    lines.append("Open items:")
    for call in open_items.get("pending_tool_calls", []):
        lines.append(f"  tool call in flight: {call['tool']} {call['arguments']} (turn {call['turn']})")
    for item in open_items.get("summary_pending", []):
        lines.append(f"  pending: {item}")
    for item in open_items.get("commitments", []):
        lines.append(f"  commitment: {item}")
    for d in open_items.get("unresolved_disputes", []):
        lines.append(f"  unresolved dispute {d['dispute_id']}: {d.get('disputed_item', '')}")
    if lines[-1] == "Open items:":
        lines.append("  none")
    return "\n".join(lines)
