"""The evaluator's pictures as PNG bytes, titled (also as ``Title`` metadata): the
confusion matrix and a grid of misclassified images; matplotlib, the evaluator's alone."""

from __future__ import annotations

import io
import os
import re
import textwrap
import warnings
from typing import Sequence

import matplotlib
from absl import logging

matplotlib.use("Agg")  # files only, whatever the user's matplotlib settings
from matplotlib import figure  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.backends import backend_agg  # noqa: E402
import numpy as np  # noqa: E402


def confusion_png(confusion: Sequence[Sequence[int]], names: Sequence[str], title: str) -> bytes:
    """A heat map of ``confusion`` (rows: true class), names on both axes, counts in
    the cells (up to 30 classes)."""
    matrix = np.asarray(confusion)
    n = len(matrix)
    size = max(4.0, 0.45 * n + 2.5)
    fig = figure.Figure(figsize=(size, size * 0.9), dpi=100)
    ax = fig.add_subplot()
    fig.colorbar(ax.imshow(matrix, cmap="Blues"), ax=ax, fraction=0.046, pad=0.04,
                 ticks=ticker.MaxNLocator(integer=True))  # counts: whole ticks
    ax.set_xticks(range(n), names, rotation=90 if n > 10 else 45,
                  ha="right" if n <= 10 else "center", fontsize=8)
    ax.set_yticks(range(n), names, fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if n <= 30:
        for (i, j), count in np.ndenumerate(matrix):
            ax.text(j, i, str(count), ha="center", va="center", fontsize=7,
                    color="white" if count > matrix.max() / 2 else "black")
    return _png(fig, title)


def misclassified_png(images: np.ndarray, true: Sequence[str], predicted: Sequence[str],
                      title: str) -> bytes:
    """A grid of uint8 images [n, 32, 32, 3], each labelled ``true → predicted``."""
    columns = min(8, max(len(images), 1))
    rows = max(1, -(-len(images) // columns))
    labels = [grid_label(t, p) for t, p in zip(true, predicted)]
    # Each label line past a short label's two takes 0.12 inch (font size 7) in each row.
    extra = max([label.count("\n") - 1 for label in labels] + [0])
    fig = figure.Figure(figsize=(1.6 * columns, (2.0 + 0.12 * extra) * rows + 0.5
                                 + 0.2 * title.count("\n")), dpi=100)
    for k in range(rows * columns):
        ax = fig.add_subplot(rows, columns, k + 1)
        ax.axis("off")
        if k < len(images):
            ax.imshow(images[k], interpolation="nearest")
            ax.set_title(labels[k], fontsize=7)
    return _png(fig, title)


# A class name's characters on a line of a grid label: a 1.6-inch column holds about 35
# of font size 7, and a line takes " →" too.
GRID_LABEL_WIDTH = 24


def grid_label(true: str, predicted: str) -> str:
    """``true →`` over ``predicted``, each broken into lines of ``GRID_LABEL_WIDTH``."""
    def lines(name: str) -> list[str]:
        return textwrap.wrap(name, GRID_LABEL_WIDTH, break_on_hyphens=False) or [name]

    first = lines(true)
    return "\n".join(first[:-1] + [f"{first[-1]} →"] + lines(predicted))


_GLYPH = re.compile(r"^Glyph (\d+) .*missing from")
_glyphs_said: set[str] = set()  # the characters a warning has named in this process


def _png(fig: figure.Figure, title: str) -> bytes:
    """The figure, titled and widened to its title, as PNG bytes.  Matplotlib's warnings
    of characters its font lacks become one warning of ours, once per character."""
    out = io.BytesIO()
    heading = fig.suptitle(title, fontsize=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn = heading.get_window_extent(backend_agg.FigureCanvasAgg(fig).get_renderer())
        width, height = fig.get_size_inches()
        fig.set_size_inches(max(width, drawn.width / fig.dpi + 0.4), height)
        fig.tight_layout()
        fig.savefig(out, format="png", metadata={"Title": title})
    missing = set()
    for warning in caught:
        if glyph := _GLYPH.match(str(warning.message)):
            missing.add(chr(int(glyph[1])))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno)
    if missing - _glyphs_said:
        logging.warning("the pictures' font has no characters for %s (in class names): "
                        "they show as boxes in the pictures only; a font that has them, named "
                        "in matplotlib's font.family setting (matplotlibrc), draws them",
                        " ".join(sorted(missing - _glyphs_said)))
        _glyphs_said.update(missing)
    return out.getvalue()


def write_new(directory: str, stem: str, png: bytes) -> str:
    """Writes ``png`` as ``<stem>.png`` in ``directory``, or ``<stem>-2.png`` ... where
    that name is taken; returns the path.  OSError: nothing of it is left."""
    n = 1
    while True:
        path = os.path.join(directory, f"{stem}.png" if n == 1 else f"{stem}-{n}.png")
        try:
            f = open(path, "xb")
            break
        except FileExistsError:
            n += 1
    try:
        with f:
            f.write(png)
    except OSError:
        os.remove(path)  # ours: half a picture is no use
        raise
    return path
