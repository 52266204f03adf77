"""The notebook as a document: the protocol (`protocol`), the saved file (`saved`), Colab's
(`colab`), the live one in a Jupyter server (`live`, `live_document`), how code runs where the
namespace lives (`runner`), which notebook this is (`identity`), the Jupyter servers a kernel can reach (`servers`), edits
through an open tab without collaboration (`frontend`, `frontend_server`) and a cell edit undone
in the saved file (`undo_cells`)."""

__all__ = [
    "colab",
    "frontend",
    "frontend_server",
    "identity",
    "live",
    "live_document",
    "protocol",
    "runner",
    "saved",
    "servers",
    "undo_cells",
]
