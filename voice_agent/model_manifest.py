"""Reading a packaged-model manifest: one TOML file of ``[models.<name>]`` tables.

The audio models (``config/audio_models.toml``) and the local summarizer's model
(``config/local_models.toml``) are pinned the same way; this reads either and leaves the
fields to the caller.
"""

from __future__ import annotations

import hashlib
import threading
import tomllib
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20
_lock = threading.Lock()
_digests: dict[tuple[str, int, int], str] = {}


def read_model_tables(path: Path | str, what: str, error: type[Exception]) -> dict[str, dict[str, Any]]:
    """The ``[models.*]`` tables of a manifest, by model name.

    Args:
        path: The TOML file.
        what: How error messages name it ("audio model manifest").
        error: The exception raised when the file is missing, malformed or lists no model.
    """
    source = Path(path)
    try:
        data: dict[str, Any] = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise error(f"{what} {source}: {exc}") from exc
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise error(f"{what} {source}: no [models.*] tables")
    return {str(name): dict(table) for name, table in models.items()}


def sha256_of(path: Path) -> str:
    """The sha256 of a file, computed once per process for a given path, size and mtime."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        cached = _digests.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    value = digest.hexdigest()
    with _lock:
        _digests[key] = value
    return value
