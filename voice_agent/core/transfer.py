"""The transfer: moving a served phone call to a person, as the domain's transfer tool sees it. Pure, no pipecat.

A served call (``voice-agent serve``) gives its domain a :class:`CallTransfer`: the telephony bridge's line
to the provider, which moves the phone call to the configured *transfer target* (a phone number or a SIP
address). Outside a served call (a simulation, the library) there is no phone call to move and no
:class:`CallTransfer`; the domain's tool then only builds its handoff card.

The tool's result says what happened, in one of two words, so neither the model nor the LLM watchdog
can take a transfer that did not happen for one that did:

* :data:`TRANSFERRED`: the provider accepted the transfer; the caller is on their way to the target.
* :data:`NOT_TRANSFERRED`: there is no transfer target here; the agent offers a callback instead.

A provider that fails the request raises :class:`TransferError`; the tool reports it as an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

TRANSFERRED = "transferred"
"""Tool result status: the provider accepted the transfer."""

NOT_TRANSFERRED = "not_transferred"
"""Tool result status: no transfer target is configured; nothing was moved."""

CALLBACK_INSTEAD = (
    "The call was not transferred and is still with you. Do not tell the caller they are being put through: "
    "say a colleague cannot take the call now and offer a callback from a billing specialist (schedule_callback)."
)
"""What the model is told whenever a transfer did not happen."""


class TransferError(Exception):
    """The provider did not move the call (an HTTP error, a timeout, an unreachable API); the message says why."""


class CallTransfer(Protocol):
    """A served call's line to its provider for the transfer.

    Attributes:
        target: The transfer target (``+15550100100`` or ``sip:desk@example.com``); None when none is
            configured, and :meth:`transfer` is then never called.
    """

    @property
    def target(self) -> str | None:
        """The transfer target, or None."""
        ...

    async def transfer(self, card: Mapping[str, Any]) -> None:
        """Moves the phone call to :attr:`target`, with the handoff ``card``; returns once the provider accepted.

        Raises:
            TransferError: The provider did not accept it; the call goes on as before.
        """
        ...
