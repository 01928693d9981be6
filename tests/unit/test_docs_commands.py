"""README.md and docs/*.md stay true to the program: every `gputui ...` command they show parses with
gputui's own argument parser (each command and each --flag exists, each choice is one it takes), every
relative link leads to a file (and heading) that exists, and README.md stays short."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import itertools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LINES = 160
README_WIDTH = 100

# What the docs write in capitals stands for a value the reader fills in: a plausible one, so the parser
# checks the flag around it (a PID must be a number, a D a duration).
PLACEHOLDERS = {
    "PID": "12345", "PIDS": "12345,12346", "FILE": "run.rec", "SECONDS": "5", "S": "5", "N": "4",
    "D": "30m", "SIZE": "16GiB", "TIME": "5m", "SCRIPT:FUNCTION": "examples/estimate_gpt.py:gpt_850m",
    "INDEX": "0", "GPUS": "0,1", "USERS": "alice", "NAMES": "alice", "HOSTS": "node1,node2",
    "URL": "https://ntfy.sh/my-gpus", "CMD": "page-me", "NAME": "prometheus", "PATH": "users",
    "ADDR:PORT": "0.0.0.0:9403", "SCENARIO": "leaky", "KIND": "graph", "KINDS": "leak,oom_soon",
    "PERCENT": "5",
}
# A command named without its required argument (`gputui probe --json`, `gputui run`) is read with one.
ARGUMENT = {"attach": ["12345"], "detach": ["12345"], "probe": ["12345"], "record": ["run.rec"],
            "replay": ["run.rec"], "estimate": ["examples/estimate_gpt.py:gpt_850m"],
            "run": ["--", "python", "train.py"]}
# Where a shell command line ends and another program's words begin.
SHELL_BREAKS = {"|", "||", "&&", "&", ";", ">", ">>", "<", "2>&1", ")", "\\"}
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}
WRAPPERS = {"srun", "ssh", "sudo", "exec", "nohup", "env", "time", "timeout"}


@functools.lru_cache(maxsize=1)
def parser() -> argparse.ArgumentParser:
    return cli.build_parser()


def parses(words: list[str]) -> bool:
    """Whether gputui's parser takes these words (argv after `gputui`) as given; --help and --version
    exit 0, a bad command, flag or value exits 2."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            parser().parse_args(words)
    except SystemExit as stop:
        return stop.code in (0, None)
    return True


def valid(words: list[str]) -> bool:
    """The words parse, as they are or with the command's required argument filled in."""
    if parses(words):
        return True
    command = next((i for i, word in enumerate(words) if word in ARGUMENT), None)
    if command is None:
        return False
    return parses(words[:command + 1] + ARGUMENT[words[command]] + words[command + 1:])


def variants(words: list[str]) -> Iterator[list[str]]:
    """Every reading of a command written with alternatives: `--precision fp32|bf16`, `attach/detach`,
    `[--json]` (the optional part given), placeholders filled in."""
    choices = []
    for word in words:
        word = word.strip("[]") or word
        word = PLACEHOLDERS.get(word, word)
        if "|" in word and word != "|":
            choices.append(word.split("|"))
        elif re.fullmatch(r"[a-z-]+(/[a-z-]+)+", word):
            choices.append(word.split("/"))
        else:
            choices.append([word])
    for chosen in itertools.product(*choices):
        yield [word for word in chosen if word not in ("...", "…", "")]


def split(text: str) -> list[str]:
    text = text.replace("\\|", "|")
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unclosed quote in prose: words as they stand
        return text.split()


def commands_in(text: str) -> Iterator[list[str]]:
    """The argv of each `gputui` command in a line of shell or inline code, up to where the shell
    leaves it (a pipe, a redirection, the next command)."""
    words = split(text)
    for i in starts(words):
        argv = []
        for following in words[i + 1:]:
            if following in SHELL_BREAKS or following.startswith(("#", ">")):
                break
            argv.append(following)
        yield argv


def starts(words: list[str]) -> Iterator[int]:
    """Where `gputui` is the program a shell runs: first in a command (after `VAR=value` settings), or
    handed to a wrapper (`srun ... gputui`, `ssh HOST gputui`); not a word of another command's
    (`kubectl -n gputui`, `ruff check gputui`)."""
    first = True
    wrapped = False
    for i, word in enumerate(words):
        if word == "gputui" and (first or wrapped and not re.fullmatch(r"-[^=]+", words[i - 1])):
            yield i
        if word in SHELL_BREAKS:
            first, wrapped = True, False
        elif first and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", word):
            continue
        elif first:
            first, wrapped = False, word in WRAPPERS


def shell_lines(page: Path) -> Iterator[tuple[int, str]]:
    """Shell commands of a page: its sh/console code blocks (a console block's `$ ` lines, a `\\` line
    joined to the next) and its inline code outside code blocks."""
    fence = None
    pending = ""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:].strip() or "text")
            continue
        if fence is None:
            for code in re.findall(r"`([^`]+)`", line):
                yield number, code
            continue
        if fence not in SHELL_BLOCKS and not stripped.startswith("$ "):
            continue
        if fence == "console" and not stripped.startswith("$ ") and not pending:
            continue
        stripped = stripped[2:] if stripped.startswith("$ ") else stripped
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        yield number, pending + stripped
        pending = ""


def doc_commands() -> list[tuple[str, list[str]]]:
    """Each `gputui` command of README.md and docs/*.md, with where it is (page:line)."""
    return [(f"{page.relative_to(ROOT)}:{number}", argv)
            for page in PAGES for number, text in shell_lines(page) for argv in commands_in(text)]


def wrong_commands(found: list[tuple[str, list[str]]]) -> list[str]:
    """The commands the parser refuses, in any of their readings."""
    wrong = []
    for where, argv in found:
        for words in variants(argv):
            if not valid(words):
                wrong.append(f"{where}: gputui {' '.join(argv)}  (as: gputui {' '.join(words)})")
    return wrong


def test_every_gputui_command_in_the_docs_parses():
    found = doc_commands()
    assert len(found) > 100, "the docs show gputui's commands; the reader found too few"
    assert wrong_commands(found) == []


def test_the_reader_finds_the_commands_in_every_form_the_docs_write_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `gputui probe PID [--json]`, `gputui attach/detach PID` or `gputui --theme dark|light`.\n"
        "```sh\n"
        "gputui --demo leaky --json | jq .snapshot   # a comment --bogus\n"
        "gputui serve --listen 0.0.0.0:9403 \\\n"
        "    --tls-cert cert.pem\n"
        "kubectl -n gputui set image daemonset/gputui gputui=REGISTRY/gputui:0.1.0\n"
        "srun --overlap --ntasks-per-node=1 gputui serve &\n"
        "```\n"
        "```console\n"
        "$ gputui --once\n"
        "gputui --not-a-command-this-is-output\n"
        "```\n"
        "```toml\n"
        'command = "~/venv/bin/gputui"  # the remote gputui (default: gputui)\n'
        "```\n"
    )
    commands = [" ".join(argv) for _, text in shell_lines(page) for argv in commands_in(text)]
    assert commands == ["probe PID [--json]", "attach/detach PID", "--theme dark|light", "--demo leaky --json",
                        "serve --listen 0.0.0.0:9403 --tls-cert cert.pem", "serve", "--once"]
    assert [" ".join(w) for w in variants(split("probe PID [--json]"))] == ["probe 12345 --json"]
    assert [" ".join(w) for w in variants(split("attach/detach PID"))] == ["attach 12345", "detach 12345"]


@pytest.mark.parametrize("command", [
    "gputui --bogus", "gputui serve --bogus", "gputui probe PID --bogus", "gputui nosuch",
    "gputui --theme dark|pink", "gputui estimate SCRIPT:FUNCTION --precision fp8", "gputui attach/nosuch PID",
    "gputui record FILE --duration abc", "gputui --watch [SECONDS] --bogus",
])
def test_a_flag_command_or_choice_that_does_not_exist_is_found(command):
    assert wrong_commands([("page.md:1", split(command)[1:])]), command


@pytest.mark.parametrize("command", [
    "gputui", "gputui --help", "gputui probe --json", "gputui run", "gputui --demo training-node serve",
    "gputui replay FILE --once|--json --at TIME", "gputui --hosts node1,node2,...",
])
def test_a_command_named_as_the_docs_name_it_is_valid(command):
    assert wrong_commands([("page.md:1", split(command)[1:])]) == [], command


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    fence = False
    for line in page.read_text().splitlines():
        if line.strip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            name = slug(line.lstrip("#"))
            count = sum(1 for a in found if a == name or re.fullmatch(re.escape(name) + r"-\d+", a))
            found.add(name if count == 0 else f"{name}-{count}")
    return found


def links(page: Path) -> Iterator[tuple[int, str]]:
    """The targets of a page's Markdown links and pictures, outside code."""
    fence = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
                yield number, target


def broken_links(pages: list[Path], root: Path = ROOT) -> list[str]:
    broken = []
    for page in pages:
        for number, target in links(page):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not file.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{where} (no such heading)")
    return broken


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    assert broken_links(PAGES) == []


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Will it fit? `gputui estimate`\n\n## Keys\n\n## Keys\n\n"
                    "[a](#will-it-fit-gputui-estimate) [b](#nowhere) [c](missing.md) [d](page.md#keys-1) "
                    "[e](https://example.com) `[f](not-a-link.md)`\n")
    assert broken_links([page], tmp_path) == ["page.md:7: #nowhere (no such heading)",
                                              "page.md:7: missing.md (no such file)"]


def test_the_readme_is_short_enough_for_a_newcomer():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    wide = [f"{n}: {len(line)} characters" for n, line in enumerate(lines, 1) if len(line) > README_WIDTH]
    assert wide == []
