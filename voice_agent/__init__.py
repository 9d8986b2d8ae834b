"""A real-time voice agent that keeps what the caller said for the whole call."""

__version__ = "0.1.0"
