"""Recorders: measurement of a call from outside it.

A call (:class:`~voice_agent.call.session.CallSession`) holds lanes, policy and guards and
measures nothing. A :class:`~voice_agent.recording.record.CallRecorder`, fed by a pipecat
observer (:class:`~voice_agent.recording.observer.RecorderObserver`), judges each turn
from what the model actually received and what actually executed.
"""
