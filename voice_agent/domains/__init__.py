"""Domains: tools, slots, backend and reference brain for one line of business."""
