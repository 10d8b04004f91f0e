"""Shell completion (bash, zsh, fish) and the man page, written from the command line's own
parser: a command or option added to ``cli.py`` is completed and documented with nothing else to
edit.

``inferdeck completion bash > /etc/bash_completion.d/inferdeck`` (or ``source <(...)``),
``inferdeck completion zsh`` (bash's, through zsh's bashcompinit), ``inferdeck completion fish >
~/.config/fish/completions/inferdeck.fish``; ``inferdeck man > inferdeck.1``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import UTC, datetime

SHELLS = ("bash", "zsh", "fish")
# an option whose value is a path: completed with file names
_PATHS = ("FILE", "DIR", "DIR|FILE", "FILE|DIR", "NAME")


@dataclass
class Option:
    flags: list[str]
    help: str
    metavar: str | None  # None: a flag without a value
    choices: list[str] | None = None

    @property
    def takes_path(self) -> bool:
        return self.metavar in _PATHS


@dataclass
class Command:
    path: list[str]  # ['mig', 'show']; [] for inferdeck itself
    help: str
    options: list[Option] = field(default_factory=list)
    positionals: list[Option] = field(default_factory=list)
    children: list[Command] = field(default_factory=list)


def _opt(action: argparse.Action) -> Option:
    choices = [str(c) for c in action.choices] if action.choices else None
    takes = action.nargs != 0
    metavar = action.metavar if isinstance(action.metavar, str) else None
    if takes and metavar is None:
        metavar = action.dest.upper()
    return Option(
        flags=list(action.option_strings) or [action.dest],
        help=(action.help or "").replace("%%", "%") if action.help != argparse.SUPPRESS else "",
        metavar=metavar if takes else None,
        choices=choices,
    )


def commands(
    parser: argparse.ArgumentParser, path: list[str] | None = None, help_: str = ""
) -> Command:
    """The parser as a tree of commands, each with its options and positionals."""
    cmd = Command(path=path or [], help=help_ or parser.description or "")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, child in action.choices.items():
                cmd.children.append(commands(child, [*cmd.path, name], helps.get(name, "")))
        elif action.option_strings:
            cmd.options.append(_opt(action))
        else:
            cmd.positionals.append(_opt(action))
    return cmd


def _walk(cmd: Command) -> list[Command]:
    return [cmd] + [c for child in cmd.children for c in _walk(child)]


def _words(items: list[str]) -> str:
    return " ".join(items)


def bash(root: Command) -> str:
    """A bash completion function: subcommands, options, each option's choices, paths."""
    all_cmds = _walk(root)
    steps = []  # "parent path:word" -> the new path
    for c in all_cmds[1:]:
        parent = " ".join(c.path[:-1])
        steps.append(f'            "{parent}:{c.path[-1]}") path="{" ".join(c.path)}" ;;')
    skips = [  # an option's value is never read as a command ('--simulate-gpus demo')
        f'"{" ".join(c.path)}|{f}"'
        for c in all_cmds
        for o in c.options
        if o.metavar is not None and o.choices is not None or o.metavar in ("FILE", "DIR")
        for f in o.flags
    ]
    values = []  # the value of an option
    for c in all_cmds:
        key = " ".join(c.path)
        for o in c.options:
            if o.metavar is None:
                continue
            pattern = "|".join(f'"{key}|{f}"' for f in o.flags)
            if o.choices:
                reply = f'COMPREPLY=($(compgen -W "{_words(o.choices)}" -- "$cur"))'
            elif o.takes_path:
                reply = 'COMPREPLY=($(compgen -f -- "$cur"))'
            else:
                reply = "COMPREPLY=()"
            values.append(f"        {pattern}) {reply}; return ;;")
    offers = []
    for c in all_cmds:
        words = [c.path[-1] for c in c.children]
        words += [f for o in c.options for f in o.flags if f.startswith("--")]
        words += [ch for p in c.positionals for ch in (p.choices or [])]
        offers.append(f'        "{" ".join(c.path)}") words="{_words(sorted(set(words)))}" ;;')
    return "\n".join(
        [
            "# bash completion for inferdeck (inferdeck completion bash)",
            "_inferdeck() {",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
            '    local path="" words="" i',
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            '        case "$path|${COMP_WORDS[i]}" in',
            f"            {'|'.join(skips)}) ((i++)); continue ;;",
            "        esac",
            '        case "$path:${COMP_WORDS[i]}" in',
            *steps,
            "        esac",
            "    done",
            '    case "$path|$prev" in',
            *values,
            "    esac",
            '    case "$path" in',
            *offers,
            "    esac",
            '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "}",
            "complete -o default -F _inferdeck inferdeck",
            "",
        ]
    )


def zsh(root: Command) -> str:
    return (
        "#compdef inferdeck\n# zsh completion for inferdeck (inferdeck completion zsh): bash's, "
        "through bashcompinit\nautoload -U +X bashcompinit && bashcompinit\n" + bash(root)
    )


def _fish_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(root: Command) -> str:
    lines = ["# fish completion for inferdeck (inferdeck completion fish)"]
    lines.append("complete -c inferdeck -f")
    for c in _walk(root):
        if not c.path:
            cond = "__fish_use_subcommand"
        else:
            names = " ".join(x.path[-1] for x in c.children)
            cond = " ; and ".join(f"__fish_seen_subcommand_from {w}" for w in c.path)
            if names:
                cond += f" ; and not __fish_seen_subcommand_from {names}"
        for child in c.children:
            lines.append(
                f"complete -c inferdeck -n {_fish_text(cond)} -a {child.path[-1]} "
                f"-d {_fish_text(child.help.split(':')[0][:70])}"
            )
        for o in c.options:
            parts = [f"complete -c inferdeck -n {_fish_text(cond)}"]
            for f in o.flags:
                parts.append(f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}")
            if o.choices:
                parts.append(f"-x -a {_fish_text(' '.join(o.choices))}")
            elif o.takes_path:
                parts.append("-r -F")
            elif o.metavar is not None:
                parts.append("-x")
            parts.append(f"-d {_fish_text(o.help.split(':')[0][:70])}")
            lines.append(" ".join(parts))
        for p in c.positionals:
            if p.choices:
                lines.append(
                    f"complete -c inferdeck -n {_fish_text(cond)} -a {_fish_text(' '.join(p.choices))}"
                )
    return "\n".join(lines) + "\n"


def _roff(text: str) -> str:
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return ("\\&" + out) if out.startswith((".", "'")) else out


def man(root: Command, version: str, when: datetime | None = None) -> str:
    """The man page (section 1), in roff."""
    day = (when or datetime.now(tz=UTC)).strftime("%Y-%m-%d")
    lines = [
        f'.TH INFERDECK 1 "{day}" "inferdeck {version}" "User Commands"',
        ".SH NAME",
        "inferdeck \\- " + _roff(root.help.rstrip(".")),
        ".SH SYNOPSIS",
        ".B inferdeck",
        "[\\fIOPTIONS\\fR] [\\fICOMMAND\\fR [\\fIOPTIONS\\fR]]",
        ".SH DESCRIPTION",
        "Without a command, inferdeck opens the console on this node (or, with",
        ".BR \\-\\-prometheus ,",
        "on the fleet). Every command's options follow.",
    ]

    def options(c: Command) -> list[str]:
        out = []
        for o in c.positionals + c.options:
            if o.flags == ["help"] or "-h" in o.flags:
                continue
            if o.flags[0].startswith("-"):
                flags = ", ".join(f"\\fB{_roff(f)}\\fR" for f in o.flags)
            else:  # a positional: its name, its choices breakable between lines
                flags = f"\\fI{_roff((o.metavar or o.flags[0]).replace('|', ' | '))}\\fR"
            value = ""
            if o.flags[0].startswith("-") and o.metavar is not None:
                shown = "|".join(o.choices) if o.choices else o.metavar
                value = f" \\fI{_roff(shown)}\\fR"
            out += [".TP", flags + value, _roff(o.help or "")]
        return out

    lines += [".SH OPTIONS", *options(root), ".SH COMMANDS"]
    for c in _walk(root)[1:]:
        if c.children:
            lines += [".SS " + _roff("inferdeck " + " ".join(c.path)), _roff(c.help)]
            continue
        lines += [".SS " + _roff("inferdeck " + " ".join(c.path)), _roff(c.help), *options(c)]
    lines += [
        ".SH EXIT STATUS",
        "0 ok; 1 warning; 2 critical, or a usage error (one sentence on standard error); "
        "3 unknown (nothing answered).",
        ".SH FILES",
        ".TP",
        "\\fI~/.config/inferdeck/config.yaml\\fR, \\fI/etc/inferdeck/config.yaml\\fR",
        "the config file (\\fBinferdeck example\\-config\\fR writes a commented one; "
        "\\fBinferdeck schema config\\fR its JSON Schema)",
        ".SH SEE ALSO",
        ".BR nvidia\\-smi (1),",
        ".BR prometheus (1)",
        "",
    ]
    return "\n".join(lines)


def script(shell: str, parser: argparse.ArgumentParser, version: str) -> str:
    root = commands(parser)
    if shell == "man":
        return man(root, version)
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](root)
