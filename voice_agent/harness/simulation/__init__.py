"""Scripted calls through the real pipeline, and the report that compares policies."""
