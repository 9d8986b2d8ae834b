"""Where the package's data files are: one lookup for every module that reads one.

The repository keeps its data at the top level, in ``config/`` (settings, scenarios and their
paraphrases, the billing records, the knowledge base, model manifests, evaluation sets). The
build maps that folder into the package as ``voice_agent/data/`` (``pyproject.toml``:
``package-dir`` and ``package-data``; docs/packaging.md says why), so:

* an installed wheel reads ``voice_agent/data/``, found with :mod:`importlib.resources`;
* a source checkout (editable install, the tests, ``scripts/``) has no ``voice_agent/data/`` and
  reads ``config/`` itself, so an edit there counts at once, with no rebuild.

Nothing else locates files by counting the parents of its own ``__file__``.

Data outside the repository (``../shared/data/``: the public SGD calls, CC BY-SA) is never shipped;
:func:`shared_data_path` says where a checkout keeps it and :func:`require_shared_data` turns a
missing file into an error that says how to supply one.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

PACKAGED_DIR = "data"
"""The folder inside ``voice_agent`` that the wheel carries ``config/`` as."""

SGD_CALLS = "sgd-calls-public.jsonl"
"""The public SGD calls (call records) in ``../shared/data/``."""

SHARED_HINT = "it is not shipped with the package; it lives in ../shared/data/ beside a source checkout"


class DataFilesMissing(FileNotFoundError):
    """The package's data files are neither in the installed package nor in a source checkout."""


def _package_dir() -> Path:
    root = resources.files(__package__ or "voice_agent")
    if not isinstance(root, Path):
        # A zip import gives a Traversable with no file-system path; the data are read as files (globbed,
        # opened by path, handed to loaders), so the package must be installed unpacked, as pip does.
        raise DataFilesMissing(f"voice_agent is imported from {root}, not a folder; install it with pip")
    return root


def checkout_root() -> Path | None:
    """The source checkout the package is imported from, or None for an installed wheel."""
    root = _package_dir().resolve().parent
    return root if (root / "config").is_dir() and (root / "pyproject.toml").is_file() else None


@cache
def data_root() -> Path:
    """The data folder: ``voice_agent/data`` when installed from a wheel, else the checkout's ``config/``."""
    packaged = _package_dir() / PACKAGED_DIR
    if packaged.is_dir():
        return packaged
    checkout = checkout_root()
    if checkout is not None:
        return checkout / "config"
    raise DataFilesMissing(
        f"voice_agent's data files are missing: neither {packaged} (an installed wheel) nor a source checkout's "
        "config/ exists; reinstall the package (pip install --force-reinstall voice-agent)"
    )


def data_path(*parts: str) -> Path:
    """A path under the data folder, e.g. ``data_path("scenarios", "billing_dispute.yaml")``."""
    return data_root().joinpath(*parts)


def shared_data_path(name: str) -> Path:
    """Where a file of ``../shared/data/`` is: beside the checkout, or beside the working directory.

    An installed package has no checkout, so the default is the same layout seen from the current
    directory (``../shared/data/NAME``); every caller also takes an explicit path.
    """
    checkout = checkout_root()
    base = checkout.parent if checkout is not None else Path.cwd().parent
    return base / "shared" / "data" / name


def require_shared_data(path: Path, what: str, flag: str) -> Path:
    """``path`` when it is a file; otherwise a :class:`FileNotFoundError` saying how to supply one.

    Args:
        path: The file wanted.
        what: What it holds, for the message ("the public SGD calls").
        flag: The command-line option that names another file ("--sgd PATH").
    """
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found at {path} ({SHARED_HINT}): pass {flag}")
    return path
