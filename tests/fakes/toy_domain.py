"""A two-tool domain and a tiny brain: first-class fakes for pipeline tests."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from voice_agent.agent.brain import BrainReply, ToolCallRequest
from voice_agent.core.call_state import CallState
from voice_agent.core.tool_spec import HarvestField, ParamKind, ToolParam, ToolSpec
from voice_agent.domains.base import Domain, ToolError

ACCOUNTS = {"ACC-1000-01": "Ada", "ACC-1000-02": "Bob"}
ACCOUNT = re.compile(r"ACC-\d{4}-\d{2}")


class ToySlots(BaseModel):
    account_id: str | None = None


class ToyBrain:
    """Looks up an account when the caller gives one; credits the account it finds in context."""

    def respond(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[str]) -> BrainReply:
        # The agent's own words of a response are recorded when it closes, after its tool call.
        last: Mapping[str, Any] = next((m for m in reversed(messages) if m.get("role") in ("user", "tool")), {})
        if last.get("role") == "tool":
            result = json.loads(str(last.get("content")))
            if result.get("status") == "rejected":
                return BrainReply("Sorry, could you give me your account number again?", asks_for="account_id")
            if result.get("status") == "boom":
                return BrainReply("Something went wrong.")
            return BrainReply("Done.")
        said = str(last.get("content", ""))
        if m := ACCOUNT.search(said):
            return BrainReply(tool_calls=(ToolCallRequest("lookup_account", {"account_id": m.group()}),))
        if "credit" in said:
            context = "\n".join(str(m.get("content") or "") for m in messages[:-1])
            found = ACCOUNT.findall(context)
            if not found:
                return BrainReply("What is your account number?", asks_for="account_id")
            return BrainReply("One moment.", (ToolCallRequest("issue_credit", {"account_id": found[-1]}),))
        if "explode" in said:
            return BrainReply(tool_calls=(ToolCallRequest("explode", {}),))
        return BrainReply("Okay. The card on file is 4111 1111 1111 1234." if "card" in said else "Okay.")


async def lookup_account(arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
    account = arguments["account_id"]
    if account not in ACCOUNTS:
        raise ToolError(f"No account {account}.")
    return {"account_id": account, "name": ACCOUNTS[account]}


async def issue_credit(arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
    return {"account_id": arguments["account_id"], "credited": 5}


async def explode(arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
    raise RuntimeError("kaboom")


TOOLS = (
    ToolSpec("lookup_account", "Look up an account.",
             (ToolParam("account_id", "Account", kind=ParamKind.IDENTIFIER, role="account"),),
             harvest=(HarvestField("account_id", role="account", slot="account_id"),)),
    ToolSpec("issue_credit", "Credit an account.",
             (ToolParam("account_id", "Account", kind=ParamKind.IDENTIFIER, role="account"),), mutates=True),
    ToolSpec("explode", "A tool that raises."),
)

TOY = Domain(
    name="toy",
    slot_model=ToySlots,
    tools=TOOLS,
    handlers={"lookup_account": lookup_account, "issue_credit": issue_credit, "explode": explode},
    make_brain=ToyBrain,
    system_prompt="You are a toy agent. Today is {today}.",
)
