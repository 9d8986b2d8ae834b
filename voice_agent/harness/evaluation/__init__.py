"""Evaluation: replaying call records through the context core, guard accuracy, pass safety, retention.

``voice-agent eval FILE.jsonl`` replays recorded calls (:mod:`.replay`) and perturbs their
date arguments (:mod:`.perturb`); ``voice-agent eval pass-safety TRACE`` forces a
summary pass at every turn of a simulated call (:mod:`.pass_safety`);
``voice-agent eval retention REPORT...`` measures per-pass retention from drop logs
(:mod:`.retention`); ``--html DIR`` renders the plots (:mod:`.html_report`);
``voice-agent eval dates`` scores the date guard on labelled sentences and generated calls
with their twins (:mod:`.date_eval`, :mod:`.date_calls`).

The replay, perturbation and retention code imports nothing from pipecat; only
:func:`voice_agent.harness.evaluation.pass_safety.record_trace` runs the pipeline.
"""
