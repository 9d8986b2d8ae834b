"""The telephony bridge (Twilio, Telnyx, Plivo media streams), its client emulator and CLI commands."""
