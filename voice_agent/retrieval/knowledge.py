"""Loads the knowledge base (markdown) and cuts it into chunks with stable ids.

Every ``*.md`` file under the knowledge directory, except ``README.md``, is read. Each ``## `` section is one
chunk whose id is ``<file stem>/<heading slug>``; a section longer than ``max_chars`` is cut at paragraph
boundaries into ``<id>``, ``<id>-2``, ``<id>-3``... Text before the first ``## `` (the ``# `` title) is not a
chunk; the title is kept as the chunk's ``document`` and prefixed to the text that gets embedded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from voice_agent.datafiles import data_path

KNOWLEDGE_DIR = data_path("knowledge")
"""The billing knowledge base shipped with the repo."""

CHUNKER_VERSION = "1"
"""Part of the content hash: bump when the chunking rules change, so cached indexes are rebuilt."""

DEFAULT_MAX_CHARS = 900
"""Sections longer than this are cut at paragraph boundaries."""

_SKIP = frozenset({"readme.md"})


@dataclass(frozen=True)
class Chunk:
    """One retrievable piece of the knowledge base.

    Attributes:
        id: Stable id, ``<file stem>/<heading slug>`` (plus ``-N`` for the Nth piece of a long section).
        document: The file's ``# `` title (or its stem when it has none).
        heading: The section heading.
        text: The section body, paragraphs joined by single newlines.
        source: The file name, relative to the knowledge directory.
    """

    id: str
    document: str
    heading: str
    text: str
    source: str

    @property
    def indexed_text(self) -> str:
        """What is embedded and indexed: title, heading and body."""
        return f"{self.document}: {self.heading}. {self.text}"

    @property
    def injected_text(self) -> str:
        """What goes into the LLM context: heading and body."""
        return f"{self.heading}: {self.text}"


def slugify(text: str) -> str:
    """Lower-case ASCII slug of a heading (``"Credit or refund: the difference"`` -> ``credit-or-refund-the-...``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "section"


def knowledge_files(directory: Path | str = KNOWLEDGE_DIR) -> list[Path]:
    """The markdown files of a knowledge directory, sorted by relative path (README excluded).

    Raises:
        FileNotFoundError: The directory does not exist.
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"knowledge directory {root} does not exist")
    return sorted((p for p in root.rglob("*.md") if p.name.lower() not in _SKIP), key=lambda p: p.as_posix())


def content_hash(directory: Path | str = KNOWLEDGE_DIR, *extra: str) -> str:
    """SHA-256 over the knowledge files' relative paths and bytes, the chunker version and ``extra`` parts.

    Args:
        directory: The knowledge directory.
        *extra: More strings that must invalidate a cache when they change (e.g. the embedding model).

    Returns:
        The hex digest.
    """
    root = Path(directory)
    digest = hashlib.sha256(f"chunker={CHUNKER_VERSION}".encode())
    for part in extra:
        digest.update(b"\0" + part.encode())
    for path in knowledge_files(root):
        digest.update(b"\0" + path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _paragraphs(lines: Iterable[str]) -> list[str]:
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def _pack(paragraphs: list[str], max_chars: int) -> list[str]:
    """Greedily packs paragraphs into pieces of at most ``max_chars`` (a single longer paragraph stays whole)."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for para in paragraphs:
        if current and size + len(para) + 1 > max_chars:
            pieces.append("\n".join(current))
            current, size = [], 0
        current.append(para)
        size += len(para) + 1
    if current:
        pieces.append("\n".join(current))
    return pieces


def chunk_markdown(text: str, stem: str, *, source: str = "", max_chars: int = DEFAULT_MAX_CHARS) -> list[Chunk]:
    """Cuts one markdown document into chunks, one per ``## `` section.

    Args:
        text: The markdown.
        stem: The id prefix (the file stem).
        source: The file name recorded on each chunk.
        max_chars: Longer sections are cut at paragraph boundaries.

    Returns:
        The chunks in document order.

    Raises:
        ValueError: Two sections of the document have the same heading slug (their ids would collide).
    """
    document = stem.replace("_", " ")
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# ") and not sections:
            document = line[2:].strip()
        elif line.startswith("## "):
            sections.append((line[3:].strip(), []))
        elif sections:
            sections[-1][1].append(line)
    chunks: list[Chunk] = []
    seen: set[str] = set()
    for heading, body in sections:
        base = f"{stem}/{slugify(heading)}"
        if base in seen:
            raise ValueError(f"{source or stem}: two sections have the id {base!r}; rename one heading")
        seen.add(base)
        for i, piece in enumerate(_pack(_paragraphs(body), max_chars)):
            chunk_id = base if i == 0 else f"{base}-{i + 1}"
            chunks.append(Chunk(id=chunk_id, document=document, heading=heading, text=piece, source=source))
    return chunks


def load_chunks(directory: Path | str = KNOWLEDGE_DIR, *, max_chars: int = DEFAULT_MAX_CHARS) -> list[Chunk]:
    """Loads and chunks every knowledge file of ``directory``.

    Args:
        directory: The knowledge directory.
        max_chars: Longer sections are cut at paragraph boundaries.

    Returns:
        All chunks, files in sorted order, sections in document order.

    Raises:
        FileNotFoundError: The directory does not exist.
        ValueError: Two chunks share an id.
    """
    root = Path(directory)
    chunks: list[Chunk] = []
    for path in knowledge_files(root):
        relative = path.relative_to(root)
        stem = relative.with_suffix("").as_posix()
        chunks.extend(chunk_markdown(path.read_text(encoding="utf-8"), stem, source=relative.as_posix(),
                                     max_chars=max_chars))
    ids = [c.id for c in chunks]
    if len(ids) != len(set(ids)):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"duplicate chunk ids in {root}: {', '.join(dupes)}")
    return chunks
