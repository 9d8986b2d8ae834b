"""Guards that refuse to act on facts that did not come from the lanes."""
