"""Optional dependencies: which extra brings what, and the error a missing one gives.

The core install (the lanes, guards, processors, pipecat, the simulation) never imports an extra at
module level; the code that needs one imports it through :func:`require` (or catches the
ImportError and raises :class:`MissingExtra`), so the user reads which extra to install instead
of a bare ``ModuleNotFoundError``. The CLI turns :class:`MissingExtra` into a one-line error and
exit status :data:`EXIT_MISSING_EXTRA`, which ``scripts/run`` reads to install the extra and run
the command again.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from types import ModuleType

DISTRIBUTION = "voice-agent"

EXTRAS: Mapping[str, str] = {
    "hosted": "the Anthropic and Google LLM services",
    "telephony": "the telephony server, the bridge and the Redis call store",
    "telemetry": "the OTLP span exporter",
    "eval": "the HTML report's plots",
    "audio": "the offline speech models",
    "local": "the local microphone and speaker",
    "local-summarizer": "the in-process llama.cpp summarizer and its model",
}
"""Extra -> what it brings (pyproject.toml's optional-dependencies, the same names)."""

EXTRA_MODULES: Mapping[str, tuple[str, ...]] = {
    "hosted": ("anthropic", "google.genai"),
    "telephony": ("fastapi", "uvicorn", "starlette", "cryptography", "redis"),
    "telemetry": ("opentelemetry.exporter.otlp",),
    "eval": ("matplotlib",),
    "audio": ("faster_whisper", "piper", "pocketsphinx", "espeakng_loader"),
    "local": ("pyaudio",),
    "local-summarizer": ("llama_cpp",),
}
"""Extra -> the modules it brings that the code imports (and the core never needs)."""

EXIT_MISSING_EXTRA = 3
"""The CLI's exit status when a command stopped for a missing extra (argument errors are 2)."""


def install_hint(extra: str) -> str:
    """The pip command that installs ``extra``."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r} (one of {', '.join(EXTRAS)})")
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MissingExtra(ImportError):
    """A command needs an optional dependency that is not installed.

    Attributes:
        extra: The extra that brings it.
        what: What needed it (a command or a feature).
    """

    def __init__(self, extra: str, what: str, cause: str = "") -> None:
        self.extra = extra
        self.what = what
        detail = f" ({cause})" if cause else ""
        super().__init__(f"{what} needs the {extra} extra: {install_hint(extra)}{detail}")


def extra_for_module(name: str | None) -> str | None:
    """The extra that brings module ``name`` (or a submodule of one it brings), or None."""
    if not name:
        return None
    for extra, modules in EXTRA_MODULES.items():
        if any(name == module or name.startswith(module + ".") or module.startswith(name + ".")
               for module in modules):
            return extra
    return None


def missing_extra(exc: ModuleNotFoundError, what: str) -> MissingExtra | None:
    """``exc`` as a :class:`MissingExtra` when the missing module belongs to an extra, else None."""
    extra = extra_for_module(exc.name)
    return None if extra is None else MissingExtra(extra, what, f"no module named {exc.name!r}")


def need(extra: str, what: str) -> None:
    """Raises :class:`MissingExtra` unless every module ``extra`` brings can be imported (nothing is imported)."""
    for module in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            raise MissingExtra(extra, what, f"no module named {module!r}")


def require(module: str, extra: str, what: str) -> ModuleType:
    """Imports ``module``, or raises :class:`MissingExtra` naming ``extra`` when it (or a dependency) is missing.

    Args:
        module: The dotted module name.
        extra: The extra that provides it.
        what: What needs it, as the user would say it ("voice-agent serve").
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtra(extra, what, f"no module named {exc.name!r}") from None
