"""Agent brains: what decides the next utterance or tool call from the assembled context."""
