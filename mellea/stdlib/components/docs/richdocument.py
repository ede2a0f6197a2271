"""Rich documents and their tables, as MObjects a model can query and transform.

``RichDocument`` wraps a Docling document: reading files (PDF, DOCX, HTML, ...) needs
the ``docling`` package, and without it those calls raise an ImportError naming it.
``Table`` and ``TableQuery`` / ``TableTransform`` work without Docling too: a table
can be built from Markdown (``Table.from_markdown``) and is then read and transposed
by a small pipe-table parser.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from mellea.core.base import Component, Span, TemplateRepresentation
from mellea.core.optional import import_optional
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.components.mobject import MObject, Query, Transform

DOCLING_MISSING = (
    "RichDocument needs the 'docling' package to read documents; install it with "
    "`pip install docling`"
)


def _docling_document_class() -> Any:
    return import_optional("docling_core.types.doc.document", DOCLING_MISSING).DoclingDocument


class RichDocument(Component[str]):
    """A Docling document, shown to the model as Markdown.

    Make one with :meth:`from_document_file` (a path, URL or Docling
    ``DocumentStream``) or :meth:`load` (JSON written by :meth:`save`).
    """

    def __init__(self, doc: Any) -> None:
        if not isinstance(doc, _docling_document_class()):
            raise TypeError(
                f"RichDocument wraps a DoclingDocument, not {type(doc).__name__}; use "
                "RichDocument.from_document_file() or RichDocument.load()"
            )
        self._doc = doc

    def parts(self) -> list[Span]:
        """No sub-parts."""
        return []

    def format_for_llm(self) -> str:
        """The whole document as Markdown."""
        return self.to_markdown()

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""

    def docling(self) -> Any:
        """The wrapped ``DoclingDocument``."""
        return self._doc

    def to_markdown(self) -> str:
        """The document as Markdown."""
        return self._doc.export_to_markdown()

    def get_tables(self) -> list[Table]:
        """The document's tables."""
        return [Table(item, self._doc) for item in self._doc.tables]

    def save(self, filename: str | Path) -> None:
        """Write the Docling document as JSON."""
        self._doc.save_as_json(Path(filename))

    @classmethod
    def load(cls, filename: str | Path) -> RichDocument:
        """A document from JSON written by :meth:`save`."""
        return cls(_docling_document_class().load_from_json(Path(filename)))

    @classmethod
    def from_document_file(cls, source: Any, do_ocr: bool = True) -> RichDocument:
        """Convert a file, URL or stream with Docling (``do_ocr=False`` skips OCR and its
        model download)."""
        try:
            from docling.datamodel.base_models import InputFormat
            from docling.datamodel.pipeline_options import PdfPipelineOptions
            from docling.document_converter import DocumentConverter, PdfFormatOption
        except ImportError as exc:
            raise ImportError(DOCLING_MISSING) from exc
        options = PdfPipelineOptions(images_scale=2.0, generate_picture_images=True, do_ocr=do_ocr)
        converter = DocumentConverter(
            format_options={InputFormat.PDF: PdfFormatOption(pipeline_options=options)}
        )
        return cls(converter.convert(source).document)


def _markdown_of(obj: Any) -> str:
    to_markdown = getattr(obj, "to_markdown", None)
    return to_markdown() if callable(to_markdown) else str(obj)


TABLE_QUERY_TEMPLATE = (
    "For the following table in Markdown format please execute the following query.\n"
    "Table:\n{{ table }}\n\nQuery:\n{{ query }}"
)
TABLE_TRANSFORM_TEMPLATE = (
    "For the following table in Markdown format please execute the following "
    "transformation.\nTable:\n{{ table }}\n\nTransformation:\n{{ transformation }}"
)


class _ShownAsMarkdownTable:
    """Shows the request's object to the model as a Markdown table."""

    _obj: Any

    def _object_args(self) -> dict[str, Any]:
        """The table as Markdown."""
        return {"table": _markdown_of(self._obj)}


class TableQuery(_ShownAsMarkdownTable, Query):
    """A question about a table (or any object with ``to_markdown()``), shown as Markdown."""

    _template = TABLE_QUERY_TEMPLATE
    _template_order = ("TableQuery", "Query")


class TableTransform(_ShownAsMarkdownTable, Transform):
    """A change to a table (or any object with ``to_markdown()``), shown as Markdown."""

    _template = TABLE_TRANSFORM_TEMPLATE
    _template_order = ("TableTransform", "Transform")


def _parse_pipe_table(md: str) -> list[list[str]] | None:
    """The rows of the first Markdown pipe table in ``md`` (the ``---`` rule dropped)."""
    rows: list[list[str]] = []
    for line in md.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if all(set(c) <= set("-: ") and c for c in cells):
            continue  # the header rule
        rows.append(cells)
    return rows or None


def _pipe_table(rows: list[list[str]]) -> str:
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    sizes = [max(3, *(len(r[i]) for r in rows)) for i in range(width)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(sizes[i]) for i, c in enumerate(cells)) + " |"

    rule = "|" + "|".join("-" * (s + 2) for s in sizes) + "|"
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])


class Table(MObject):
    """One table: a Docling ``TableItem`` in its document, or rows read from Markdown."""

    def __init__(self, ti: Any, doc: Any) -> None:
        super().__init__(query_type=TableQuery, transform_type=TableTransform)
        self._ti = ti
        self._doc = doc

    @classmethod
    def from_markdown(cls, md: str) -> Table | None:
        """The first table in ``md``, or ``None``. Read by Docling when it is installed,
        else by a pipe-table parser (ours)."""
        try:
            from docling_core.types.io import DocumentStream
        except ImportError:
            rows = _parse_pipe_table(md)
            return cls(rows, None) if rows else None
        stream = io.BytesIO(f"# X\n\n{md}\n".encode())
        tables = RichDocument.from_document_file(DocumentStream(name="x.md", stream=stream))
        found = tables.get_tables()
        return found[0] if found else None

    def parts(self) -> list[Span]:
        """No sub-parts.

        [no-index]
        """
        return []

    def to_markdown(self) -> str:
        """The table as Markdown.

        [no-index]
        """
        if isinstance(self._ti, list):
            return _pipe_table(self._ti)
        return self._ti.export_to_markdown(self._doc)

    def transpose(self) -> Table | None:
        """The table with rows and columns swapped."""
        if isinstance(self._ti, list):
            width = max(len(r) for r in self._ti)
            rows = [r + [""] * (width - len(r)) for r in self._ti]
            return Table([list(col) for col in zip(*rows, strict=True)], None)
        frame = self._ti.export_to_dataframe().transpose()
        return Table.from_markdown(frame.to_markdown())

    def format_for_llm(self) -> TemplateRepresentation:
        """The table's Markdown, with its methods as tools.

        [no-index]
        """
        from mellea.backends.tools import MelleaTool

        return TemplateRepresentation(
            obj=self,
            args={"table": self.to_markdown()},
            tools={k: MelleaTool.from_callable(f, k) for k, f in self._get_all_members().items()},
            fields=[],
            template="{{ table }}",
        )


__all__ = ["RichDocument", "Table", "TableQuery", "TableTransform"]
