"""Date-constraint engine: what callers say about when they can be reached.

Pure Python over dateparser and python-dateutil; imports nothing from pipecat.
"""

from voice_agent.core.dates.corrections import resolve_corrections, supersedes
from voice_agent.core.dates.extract import clear_cache, extract_constraints
from voice_agent.core.dates.model import WEEKDAY_NAMES, ConstraintKind, DateConstraint
from voice_agent.core.dates.statements import DateStatement, read_statements
from voice_agent.core.dates.subjects import DateSubject, StatementKind

__all__ = [
    "WEEKDAY_NAMES",
    "ConstraintKind",
    "DateConstraint",
    "DateStatement",
    "DateSubject",
    "StatementKind",
    "clear_cache",
    "extract_constraints",
    "read_statements",
    "resolve_corrections",
    "supersedes",
]
