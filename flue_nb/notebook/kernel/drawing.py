"""What the `python` tool's code drew: figures and rich images, captured as the model's images.

Code run by the `python` tool may draw in three ways, and each becomes an image of its result:
- a matplotlib figure, shown with `plt.show()` or just left open (as a notebook cell shows it);
- `display(...)` of anything with an image form (`IPython.display.Image`, `SVG`, a figure);
- a final expression whose value has an image form (`_repr_png_`, `_repr_mimebundle_`, ...).

In a kernel the person's cell shows the same images: `display(...)` output passes through, and
figures and final values are displayed once captured, unless a view draws the call's card with
its figures (a chat, a `%%flue` cell's widget, see `drawn_in_views`): displayed as well, they
would land in whatever cell runs at the time (a chat has none) and be stored twice. Figures the code created are closed after
they are captured (as the inline backend does after a cell), so they are neither shown twice
nor kept alive. matplotlib is never imported here: only looked up if the code imported it.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.images import figure_png, image_from_bytes, rich_image, svg_png
from flue_nb.runtime.messages import ImagePart

__all__ = ["Drawn", "capture", "drawn_in_views", "shown_in_cell"]

_DISPLAY_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_views: list[Callable[[str], bool]] = []
"""Checks whether a view of this kernel draws a submission's tool cards (and their figures)."""


_in_cells: set[str] = set()
"""Submissions a text-mode cell waits for: their figures go under that cell even if a chat draws
them too (the person asked there, and the transcript only names them)."""


def drawn_in_views(check: Callable[[str], bool]) -> None:
    """Register `check(submission_id)`: True when a view draws that submission's figures itself."""
    _views.append(check)


@contextlib.contextmanager
def shown_in_cell(submission_id: str) -> Iterator[None]:
    """While the block runs, `submission_id`'s figures are displayed in the running cell."""
    _in_cells.add(submission_id)
    try:
        yield
    finally:
        _in_cells.discard(submission_id)


@dataclass
class Drawn:
    """The images one `python` call produced, in the order they were drawn."""

    images: list[ImagePart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Images that could not be sent, one line each."""
    to_show: list[ImagePart] = field(default_factory=list)
    """Images the person's cell has not shown yet (the rest went through `display`)."""

    def add(self, data: bytes, label: str, *, shown: bool = False) -> None:
        """Keep one image (once per content: the same figure shown twice is one image)."""
        try:
            part = image_from_bytes(data, label=label)
        except ConfigError as exc:
            self.notes.append(f"{label}: {exc}")
            return
        if any(p.digest == part.digest for p in self.images):
            return
        self.images.append(part)
        if not shown:
            self.to_show.append(part)

    def add_value(self, value: Any) -> None:
        """The final expression's value, when it has an image form."""
        if _is_figure(value) and any(p.label == _figure_label(value) for p in self.images):
            return  # already captured as an open figure
        try:
            data, why_not = rich_image(value)
        except Exception as exc:  # noqa: BLE001 - a value that cannot draw itself is a note
            self.notes.append(f"the value's image could not be drawn ({type(exc).__name__}: {exc})")
            return
        if data is not None:
            label = _figure_label(value) if _is_figure(value) else f"the value ({type(value).__name__})"
            self.add(data, label)
        elif why_not:
            self.notes.append(f"the value is {why_not}; it was not sent")

    def summary(self) -> str:
        """The text line that goes with the images (empty when there are none)."""
        lines = []
        if self.images:
            names = ", ".join(f"{p.label} ({p.width}×{p.height})" for p in self.images)
            lines.append(f"[{len(self.images)} image(s) drawn: {names}]")
        lines += [f"[Not sent: {note}]" for note in self.notes]
        return "\n".join(lines)


def _is_figure(obj: Any) -> bool:
    cls = type(obj)
    return cls.__name__ == "Figure" and cls.__module__.startswith("matplotlib")


def _figure_label(fig: Any) -> str:
    num = getattr(fig, "number", None)
    return f"figure {num}" if num is not None else "a figure"


@contextlib.contextmanager
def capture() -> Iterator[Drawn]:
    """Capture what the code run inside the block draws; `Drawn` is complete when it exits."""
    drawn = Drawn()
    plt = sys.modules.get("matplotlib.pyplot")
    before = set(plt.get_fignums()) if plt is not None else set()
    with contextlib.ExitStack() as stack:

        def capture_show(module: Any) -> None:
            stack.enter_context(_patched(module, "show", lambda *a, **k: _take_figures(drawn, before)))

        if plt is not None:
            capture_show(plt)
        else:
            # The code may import pyplot itself (a fresh kernel): its `show` is captured from
            # then on, or the inline backend would put the figure in the cell beside the view's.
            stack.enter_context(_when_imported("matplotlib.pyplot", capture_show))
        pub = _display_publisher()
        if pub is not None:
            stack.enter_context(_patched(pub, "publish", _passing(pub.publish, drawn)))
        # Agg (a headless run) warns that it cannot show a figure; here showing is capturing.
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")
        yield drawn
    _take_figures(drawn, before)


def show(drawn: Drawn, submission_id: str | None = None) -> None:
    """Show the person, in the running cell, the images it has not shown yet (kernels only),
    unless a view draws them in the call's card (`drawn_in_views`)."""
    if not drawn.to_show:
        return
    if submission_id is not None and submission_id not in _in_cells and any(check(submission_id) for check in _views):
        drawn.to_show.clear()
        return
    shell = _kernel_shell()
    if shell is None:
        return
    from IPython.display import Image, display

    for part in drawn.to_show:
        display(Image(data=part.data, format=part.media_type.rsplit("/", 1)[-1]))
    drawn.to_show.clear()


def _take_figures(drawn: Drawn, before: set[int]) -> None:
    """Capture the open figures the code created or changed; close the ones it created."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    from matplotlib._pylab_helpers import Gcf

    for num in plt.get_fignums():
        manager = Gcf.get_fig_manager(num)
        if manager is None:
            continue
        fig = manager.canvas.figure
        if num in before and not fig.stale:
            continue  # the person's own figure, untouched by this code
        try:
            drawn.add(figure_png(fig), _figure_label(fig))
        except Exception as exc:  # noqa: BLE001 - a figure that fails to draw is a note
            drawn.notes.append(f"{_figure_label(fig)} could not be drawn ({type(exc).__name__}: {exc})")
        if num not in before:
            plt.close(fig)


def _passing(publish: Any, drawn: Drawn) -> Any:
    def publish_and_keep(data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict):
            label = f"display {len(drawn.images) + 1}"
            for mime in _DISPLAY_MIMES:
                raw = data.get(mime)
                if raw:
                    blob = base64.b64decode(raw) if isinstance(raw, str) else bytes(raw)
                    drawn.add(blob, label, shown=True)
                    break
            else:
                svg = data.get("image/svg+xml")
                if isinstance(svg, (str, bytes)) and svg:
                    # `display(SVG(...))`: rasterised like an SVG value (scaled before drawing).
                    png, why_not = svg_png(svg)
                    if png is not None:
                        drawn.add(png, label, shown=True)
                    else:
                        drawn.notes.append(f"{label} is {why_not}")
        return publish(data, *args, **kwargs)

    return publish_and_keep


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    had = name in vars(obj) if hasattr(obj, "__dict__") else False
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had or not hasattr(type(obj), name):
            setattr(obj, name, old)
        else:
            delattr(obj, name)  # back to the class's method


@contextlib.contextmanager
def _when_imported(name: str, then: Callable[[Any], None]) -> Iterator[None]:
    """While the block runs, call `then(module)` right after module `name` is first imported."""
    finder = _AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds module `name` through the other finders and runs `then` on it once it has loaded."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once, and not asked again while the others look
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, then = spec.loader, self.then

        class After(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                then(module)

        spec.loader = After()
        return spec


def _kernel_shell() -> Any:
    """The running Jupyter kernel's shell (not a terminal IPython, not a test's plain shell)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    shell = ipython.get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def _display_publisher() -> Any:
    shell = _kernel_shell()
    return getattr(shell, "display_pub", None) if shell is not None else None
