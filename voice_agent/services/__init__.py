"""Service factory and our own pipecat services."""
