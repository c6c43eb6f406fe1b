"""`torus completion bash|zsh`: a completion script made from the parser itself, so it never
lags behind the commands. Completes commands, subcommands and options (not values)."""

from __future__ import annotations

import argparse
import shlex


def _tree(parser: argparse.ArgumentParser, path: str = "torus") -> dict[str, list[str]]:
    """{"torus jobs ls": [words that may follow], ...} for every command path."""
    words = [opt for action in parser._actions for opt in action.option_strings]
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words.append(name)
                found.update(_tree(child, f"{path} {name}"))
    found[path] = sorted(set(words))
    return found


BASH = """# torus completion for bash: eval "$(torus completion bash)"
_torus_complete() {
  local cur path w i
  cur="${COMP_WORDS[COMP_CWORD]}"
  path=torus
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    [[ $w == -* ]] && continue
    case " ${_torus_words[$path]} " in
      *" $w "*) path="$path $w" ;;
    esac
  done
  COMPREPLY=($(compgen -W "${_torus_words[$path]}" -- "$cur"))
}
declare -gA _torus_words=(
%s
)
complete -F _torus_complete torus
"""

ZSH = """# torus completion for zsh: eval "$(torus completion zsh)"
autoload -U +X bashcompinit && bashcompinit
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    entries = "\n".join(
        f"  [{shlex.quote(path)}]={shlex.quote(' '.join(words))}"
        for path, words in sorted(_tree(parser).items())
    )
    bash = BASH % entries
    return ZSH + bash if shell == "zsh" else bash


def add_parsers(sub) -> None:
    completion = sub.add_parser("completion", help="print a shell completion script")
    completion.add_argument("shell", choices=["bash", "zsh"])
    completion.set_defaults(func=None, needs_client=False, completion=True)
