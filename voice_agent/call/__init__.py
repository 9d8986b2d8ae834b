"""One call of the product: its session, its pipeline and the factory that builds both from the settings.

``factory.build_call`` is where a call starts; ``session.CallSession`` is the glue between the pipecat
pipeline (``pipeline``) and the pure core; ``long_call.LongCall`` is the public API that attaches the same
lanes and guards to an existing pipecat bot; ``telemetry`` puts one span per turn on the call's trace.
"""
