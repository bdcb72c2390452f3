"""How a score reads (cifar10.evaluation.result): the class table's columns line up
whatever the class names' scripts."""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from cifar10.evaluation.result import EvalResult, class_table


def columns(text: str) -> int:
    """The terminal columns of ``text``, counted as a terminal does: East Asian wide
    and fullwidth characters take two, combining marks none."""
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def result_of(names: list[str]) -> EvalResult:
    """A score of three classes named ``names`` (scoring.per_class's figures, without
    the TensorFlow that module loads)."""
    confusion = np.array([[3, 1, 0], [0, 12, 0], [2, 0, 105]])
    figures = [{"name": name, "count": int(confusion[i].sum()),
                "recall": confusion[i, i] / confusion[i].sum(),
                "precision": confusion[i, i] / confusion[:, i].sum()}
               for i, name in enumerate(names)]
    return EvalResult(checkpoint="/r/model.ckpt-5", step=5, checkpoint_mtime_ns=0,
                      precision=0.9, correct=120, examples=123, weights="averages",
                      eval_data="test", wall_time=0.0, seconds=1.0,
                      confusion_matrix=confusion.tolist(), per_class=figures)


def field_ends(line: str, count: int) -> list[int]:
    """The terminal columns where the last ``count`` fields of ``line`` end."""
    return [columns(line[:m.end()]) for m in re.finditer(r"\S+", line)][-count:]


def test_wide_and_combining_class_names_keep_the_columns_in_line():
    # A CJK name (6 columns), a fullwidth one (4), one with a combining accent (4).
    lines = class_table(result_of(["自動車", "ＣＡＴ", "cafe\u0301"]))
    table, matrix = lines[:4], lines[5:]
    # Each figure ends in the column its heading ends in; each count of the matrix
    # in the column its class number ends in.
    assert [field_ends(line, 3) for line in table] == [field_ends(table[0], 3)] * 4
    assert [field_ends(line, 3) for line in matrix] == [field_ends(matrix[0], 3)] * 4
    assert table == ["class    count  recall  precision",
                     "自動車       4   0.750      0.600",
                     "ＣＡＴ      12   1.000      0.923",
                     "cafe\u0301       107   0.981      1.000"]
    assert matrix == ["               0     1     2",
                      " 0  自動車     3     1     0",
                      " 1  ＣＡＴ     0    12     0",
                      " 2  cafe\u0301       2     0   105"]


def test_the_line_says_training_examples_under_train_eval():
    result = result_of(["a", "b", "c"])
    assert re.search(r": precision @ 1 = 0\.900 \(step 5, model\.ckpt-5, 123 examples, "
                     r"averages weights\)$", result.line())
    result.eval_data = "train_eval"
    assert re.search(r": precision @ 1 = 0\.900 \(step 5, model\.ckpt-5, 123 training "
                     r"examples, averages weights\)$", result.line())
