"""A flag mistake in the program's words, where absl's show Python's own errors
(``invalid literal for int() with base 10``), its bound names (``is not a positive
integer``) or a rule's flag values (``flags dataset=cifar100, synthetic_data=True:``).
"""

from __future__ import annotations

import re

from absl import flags

# absl's words for a bad flag value, and the program's: a value of the wrong type, out
# of bounds, or against a rule of several flags (absl puts their values first).
_FLAG_VALUE = re.compile(r"^flag (--[^=\s]+)=(.*?): (.*)$", re.S)
_UNKNOWN = re.compile(r"^Unknown command line flag '([^']*)'(?:\. Did you mean: (.*?) \?)?$",
                      re.S)
_RULE = re.compile(r"^flags (\w+=[^:]*?(, \w+=[^:]*?)*): (.*)$", re.S)
_TYPE_WORDS = ((re.compile(r"^invalid literal for int\(\) with base 10: .*$", re.S),
                "expected a whole number"),
               (re.compile(r"^could not convert string to float: .*$", re.S),
                "expected a number"),
               (re.compile(r"^\S+ is not (?:a |an )?(.*)$", re.S), "must be {}"),
               (re.compile(r"^\('Non-boolean argument to boolean flag', .*\)$", re.S),
                "expected true or false"),
               (re.compile(r"^value should be one of <(.*)>$", re.S), "must be one of {}"))
_FLAGFILE = re.compile(r"^ERROR:: Unable to open flagfile: (?:\[Errno \d+\] )?([^:]*): "
                       r"'(.*)'$", re.S)
_MISSING = re.compile(r"^Missing value for flag (--\S+)$")
_BOUND_WORDS = {"positive integer": "a whole number of at least 1",
                "non-negative integer": "a whole number of at least 0",
                "non-negative number": "a number of at least 0",
                "positive number": "a number above 0"}


def flag_error_text(error: flags.Error) -> str:
    """The one line of a flag mistake, in the program's words: ``--max_steps=abc:
    expected a whole number`` where absl says ``flag --max_steps=abc: invalid literal
    for int() with base 10: 'abc'``, and a rule of several flags without absl's list
    of their values."""
    text = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    flagfile = _FLAGFILE.match(text)
    if flagfile:
        return f"--flagfile={flagfile[2]}: {flagfile[1]}; name a file of flags, one per line"
    missing = _MISSING.match(text)
    if missing:
        return f"{missing[1]} needs a value ({missing[1]}=VALUE)"
    unknown = _UNKNOWN.match(text)
    if unknown:
        guesses = [f"--{name.strip()}" for name in (unknown[2] or "").split(",") if name.strip()]
        return (f"unknown flag --{unknown[1]}" +
                (f" (did you mean {' or '.join(guesses)}?)" if guesses else ""))
    rule = _RULE.match(text)
    if rule:
        return rule[3]
    value = _FLAG_VALUE.match(text)
    if not value:
        return text
    name, given, problem = value.groups()
    for pattern, words in _TYPE_WORDS:
        found = pattern.match(problem)
        if found:
            if found.groups() and words.startswith("must be one of"):
                words = words.format(", ".join(found[1].split("|")))
            elif found.groups():
                bound = found[1]
                words = words.format(_BOUND_WORDS.get(bound) or
                                     "a " + bound.replace("integer", "whole number"))
            return f"{name}={given}: {words}"
    return f"{name}={given}: {problem}"


def bad_flag_value(error: flags.Error) -> tuple[str, str] | None:
    """The flag's name (without its dashes) and the value as given, of absl's error
    for a bad value of one flag (``flag --max_steps=abc: ...``), or None."""
    value = _FLAG_VALUE.match(str(error).strip())
    return (value[1].lstrip("-"), value[2]) if value else None
