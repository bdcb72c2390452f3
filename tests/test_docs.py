"""README.md and docs/ cannot rot silently: every relative link resolves, every
``--flag`` they name exists on the program they name it for, the front page stays
short.

Which program a flag is named for:
* on a line that names a command (a program, a script, or another tool such as pip
  or tensorboard), the last command named before the flag; in a code block a line
  ending in ``\\`` goes on to the next, and after a bare ``--`` (launch_workers.py)
  flags are cifar10-train's.  Other tools' flags are not checked;
* in a table, the programs named in the line above the table (its heading or intro
  line), each of which must have the flag;
* anywhere else, at least one of the programs or scripts must have it.
"""

import collections
import pathlib
import re

import pytest
from absl import flags

from cli import ENTRY_POINTS

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPTS = ("benchmark.py", "gpu_check.py", "launch_workers.py", "make_synthetic_data.py")
OTHER_TOOLS = ("pip", "pytest", "venv", "tensorboard", "docker", "curl", "git",
               "saved_model_cli", "bash", "srun", "sbatch", "scancel", "scontrol",
               "mungekey", "munged")
# Flags absl gives every program, and --version (cifar10.cli.process).
ABSL_FLAGS = {"help", "helpshort", "helpfull", "helpxml", "flagfile", "undefok",
              "verbosity", "logtostderr", "alsologtostderr", "log_dir", "stderrthreshold",
              "version"}

TOKEN = re.compile(
    r"(?P<program>(?<![\w/-])cifar10-(?:train|eval|predict|export|prepare|launch)(?![\w-]))"
    r"|(?P<script>(?<![\w-])(?:" + "|".join(re.escape(s) for s in SCRIPTS) + r"))"
    r"|(?P<tool>(?<![\w-])(?:" + "|".join(OTHER_TOOLS) + r")(?![\w-]))"
    r"|(?P<separator>(?<=\s)--(?=\s))"
    r"|(?<![\w-])--(?P<flag>[a-z][a-z0-9_]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _names(values: flags.FlagValues) -> set[str]:
    names = set(values)
    return names | {f"no{name}" for name in names if values[name].boolean}


def known_flags() -> dict[str, set[str]]:
    """{program or script: the flags it takes}."""
    known = {}
    for name, module in ENTRY_POINTS.items():
        values = flags.FlagValues()
        module.define_flags(values)
        known[name] = _names(values) | ABSL_FLAGS
    for script in SCRIPTS:
        source = (ROOT / "scripts" / script).read_text()
        known[script] = set(re.findall(r"add_argument\(\s*\"--(\w+)\"", source))
    known["launch_workers.py"] = known["cifar10-launch"]  # its former name, a thin wrapper
    return known


KNOWN = known_flags()


def lines_of(page: pathlib.Path):
    """(line number, kind, text) of a page: kind is 'code', 'table' or 'text'; a code
    line continued with a backslash comes joined with the next ones."""
    in_code, pending, start = False, "", 0
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            if not pending:
                start = number
            pending += line.rstrip("\\") + " "
            if not line.rstrip().endswith("\\"):
                yield start, "code", pending
                pending = ""
        else:
            yield number, "table" if line.lstrip().startswith("|") else "text", line


def flag_mentions(page: pathlib.Path):
    """(line number, flag, the programs it is named for or None for any)."""
    intro: list[str] = []
    previous_kind, previous_text = "text", ""
    for number, kind, text in lines_of(page):
        if kind == "table" and previous_kind != "table":
            intro = [m["program"] or m["script"] for m in TOKEN.finditer(previous_text)
                     if m["program"] or m["script"]]
        if text.strip():
            previous_kind, previous_text = kind, text
        command = None
        for m in TOKEN.finditer(text):
            if m["flag"] is None:
                command = m["program"] or m["script"] or m["tool"] or (
                    "cifar10-train" if m["separator"] else None)
                continue
            if command is not None:
                if command in KNOWN:
                    yield number, m["flag"], [command]
            elif kind == "table" and intro:
                yield number, m["flag"], intro
            else:
                yield number, m["flag"], None


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    seen, found = collections.Counter(), set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} +(.*)", line)):
            base = slug(m[1])
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def test_there_are_pages_to_check():
    names = {page.name for page in PAGES}
    assert {"README.md", "training.md", "performance.md", "output.md"} <= names, names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for number, kind, text in lines_of(page):
        if kind == "code":
            continue
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if ROOT not in resolved.parents and resolved != ROOT:
                broken.append(f"{number}: {target} leaves the repository")
            elif not resolved.exists():
                broken.append(f"{number}: {target} does not exist")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{number}: {target}: no heading with that anchor")
    assert not broken, f"{page.name}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_exists_on_the_program_it_is_named_for(page):
    wrong = []
    for number, flag, programs in flag_mentions(page):
        if programs is None:
            if not any(flag in names for names in KNOWN.values()):
                wrong.append(f"{number}: --{flag} is no program's or script's flag")
        else:
            wrong += [f"{number}: {program} has no --{flag}"
                      for program in programs if flag not in KNOWN[program]]
    assert not wrong, f"{page.name}: " + "; ".join(wrong)


def test_the_readme_fits_on_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)


def test_the_readmes_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    command = ci[ci.index("{ command -v slurmd"):].strip()
    assert command in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("text, want", [
    ("cifar10-eval --run_once --weights=raw", [("run_once", ["cifar10-eval"]),
                                               ("weights", ["cifar10-eval"])]),
    ("tensorboard --logdir=runs; then `--use_bf16`", []),
    ("`--use_bf16` with cifar10-train --max_steps=1", [("use_bf16", None),
                                                     ("max_steps", ["cifar10-train"])]),
    ("python scripts/launch_workers.py --num_workers=2 -- --max_steps=3",
     [("num_workers", ["launch_workers.py"]), ("max_steps", ["cifar10-train"])]),
])
def test_flags_are_named_for_the_command_before_them(tmp_path, text, want):
    page = tmp_path / "page.md"
    page.write_text(text + "\n")
    assert [(flag, programs) for _, flag, programs in flag_mentions(page)] == want


def test_a_table_belongs_to_the_programs_of_its_intro_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Shared by `cifar10-train` and `cifar10-eval`:\n\n| flag | meaning |\n"
                    "|---|---|\n| `--batch_size` | images per batch |\n")
    assert list(flag_mentions(page)) == [(5, "batch_size", ["cifar10-train", "cifar10-eval"])]


def test_a_wrong_flag_and_a_broken_anchor_are_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n\ncifar10-export --use_bf16\n")
    mentions = list(flag_mentions(page))
    assert mentions == [(3, "use_bf16", ["cifar10-export"])]
    assert "use_bf16" not in KNOWN["cifar10-export"]
    assert anchors(page) == {"top"}
    assert slug("bfloat16 (`--use_bf16`)") == "bfloat16---use_bf16"
