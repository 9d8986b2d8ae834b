"""Thin pipecat FrameProcessors that connect frames to the core."""
