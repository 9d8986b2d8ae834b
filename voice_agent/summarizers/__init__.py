"""Summarizers: an LLM one for real calls, a fault-injecting one for simulation."""
