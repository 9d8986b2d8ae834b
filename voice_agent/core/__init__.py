"""The pure core: lanes, policy, assembler and guards. Imports nothing from pipecat."""
