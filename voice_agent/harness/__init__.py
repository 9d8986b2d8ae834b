"""The harness: what measures the product and is never part of a served call.

Simulated calls and their fault model (``simulation``), the evaluations and benchmarks' figures
(``evaluation``), the scripted calls and their paraphrases (``scenarios``, ``paraphrases``), the policy
calculator's report (``policy_report``), pipecat's eval-harness bot (``eval_bot``), and the processes the resume
tests and the store benchmark start: a served worker (``fleet_worker``) and a real redis-server (``redis_server``).
"""
