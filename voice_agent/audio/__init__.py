"""Offline audio: the model manifest, STT/TTS services and the stacks that combine them."""

from voice_agent.audio.manifest import AudioModelError, load_manifest, verify_model

__all__ = ["AudioModelError", "load_manifest", "verify_model"]
