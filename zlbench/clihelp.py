"""`--help` that fits a screen: options in named groups, the common ones first.

click lists options in declaration order under one heading; a command built with
``GroupedCommand`` lists them under the headings of its ``option_groups`` (title,
parameter names), in that order, and anything not named under "Other options". A
knob's long explanation stays in docs/cli.md; the help shows its first sentence.
"""

from __future__ import annotations

import os
import re
from typing import List, Sequence, Tuple

import click

# Past this, an option's help is cut to its first sentence (the rest: docs/cli.md).
BRIEF_CHARS = 150
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\]])\. (?=[A-Z0-9(])")


def brief(text: str, limit: int = BRIEF_CHARS) -> str:
    """The help as given when short, else its first sentence (or words up to ``limit``);
    the ``Env: X.`` and bracketed tails (``[default: ...]``, click's ``[x>=1]``) are kept."""
    m = re.search(r"(\s*Env: [A-Z0-9_]+\.)?((?:\s*\[[^\[\]]*\])*)\s*$", text)
    tail = " ".join(part.strip() for part in m.groups() if part and part.strip()) if m else ""
    body = text[: m.start()] if m and tail else text
    if len(body) > limit:
        cut = _SENTENCE_END.search(body)
        if cut and cut.start() < limit:
            body = body[: cut.start() + 1]
        else:
            body = body[: limit - 1].rsplit(" ", 1)[0] + "…"
    return f"{body} {tail}".strip()


class InputError(click.ClickException):
    """A usage error found after parsing (a missing input, a misspelt operator, an A/B
    refused): exit 2 like click's own usage errors, in every command; 1 is kept for
    "ran, and what it found failed"."""

    exit_code = 2


class GroupedCommand(click.Command):
    """A click command whose options are listed in groups (``option_groups``)."""

    def __init__(self, *args, option_groups: Sequence[Tuple[str, Sequence[str]]] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.option_groups = [(title, list(names)) for title, names in option_groups]

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as e:
            _name_the_variable(e, args)
            raise

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        by_name = {p.name: p for p in self.get_params(ctx)}
        listed: set = set()
        sections: List[Tuple[str, List[Tuple[str, str]]]] = []
        for title, names in self.option_groups:
            rows = []
            for name in names:
                param = by_name.get(name)
                record = param.get_help_record(ctx) if param is not None else None
                if record:
                    rows.append((record[0], brief(record[1])))
                    listed.add(name)
            if rows:
                sections.append((title, rows))
        rest = [
            (rec[0], brief(rec[1]))
            for p in self.get_params(ctx)
            if p.name not in listed and (rec := p.get_help_record(ctx))
        ]
        if rest:
            sections.append(("Other options", rest))
        for title, rows in sections:
            with formatter.section(title):
                formatter.write_dl(rows)


def _name_the_variable(e: click.BadParameter, args: Sequence[str]) -> None:
    """A bad value that came from an environment variable: say which, with its value
    (``ZL_RUN_MODE='frsh'``), since the user never typed the flag. (click records where
    a value came from only once it converted, so the command line is looked at.)"""
    param = e.param
    if not isinstance(param, click.Option) or not param.envvar:
        return
    flags = [*param.opts, *param.secondary_opts]
    if any(a == f or a.startswith(f + "=") for a in args for f in flags):
        return
    names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
    for name in names:
        if os.environ.get(name):
            e.message = f"{e.message} (from the environment: {name}={os.environ[name]!r})"
            return
