"""Writing a command's outputs (an HTML document and its Markdown twin, a JUnit or JSON file):
a path that cannot be written is a one-line error naming the option, never a traceback."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from ..errors import CommbenchError


def twin_paths(out: Path) -> tuple[Path, Path]:
    out = Path(out)
    html_path = out if out.suffix in (".html", ".htm") else out.with_suffix(".html")
    return html_path, html_path.with_suffix(".md")


def write_both(doc, out: Path) -> tuple[Path, Path]:
    from .report.build import write_document

    html_path, md_path = twin_paths(out)
    if not html_path.parent.is_dir():
        raise CommbenchError(f"output folder {html_path.parent} does not exist or is not a folder; create it or pick "
                             "another --out.")
    with writing(html_path):
        return write_document(doc, html_path, md_path)   # temp + rename: no cut report on a full disk


@contextmanager
def writing(path: Path, option: str = "--out"):
    """An output that cannot be written (read-only folder, a dangling link, a full disk) is a
    one-line error, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise CommbenchError(f"cannot write {path}: {exc.strerror or exc}; pick another {option}") from None


def check_writable(path: Path, option: str) -> None:
    """Refuse an output path that cannot be written before a run spends its time (exit 2)."""
    path = Path(path)
    if path.is_dir():
        raise CommbenchError(f"cannot write {path}: it is a folder; pick another {option}")
    parent = path.parent
    if not parent.is_dir():
        raise CommbenchError(f"cannot write {path}: {parent} does not exist or is not a folder; "
                             f"pick another {option}")
    if not os.access(parent, os.W_OK):
        raise CommbenchError(f"cannot write {path}: {parent} is not writable; pick another {option}")


def write_text_whole(path: Path, text: str, option: str) -> None:
    """``path`` written whole or not at all: a twin beside it, then renamed into place (as the
    reports are), so a full disk leaves the previous file (or none), never a cut or empty one.
    A failure is a one-line error naming ``option``."""
    from ..errors import RunFolderError
    from ..runfolder import files

    path = Path(path)
    with writing(path, option):
        try:
            files.replace_whole(path.parent, path.name, text.encode("utf-8"))
        except RunFolderError as exc:   # a name no file may have
            raise CommbenchError(f"cannot write {path}: {exc}; pick another {option}") from None
