"""``decisionflow`` loads only the module of the command word it is given: the table of words must
name the module that registers each, and a command's help must read the same either way."""

from __future__ import annotations

import argparse

import pytest

import decisionflow_cli as cli


def _words(parser: argparse.ArgumentParser) -> list[str]:
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(subparsers.choices)


def test_every_module_registers_exactly_the_words_the_table_gives_it() -> None:
    for module in cli.COMMAND_MODULES:
        given = [word for word, owner in cli.COMMANDS.items() if owner == module]
        assert _words(cli.build_parser([module])) == given, module
    # The full parser, which --help prints, lists the words in the table's order.
    assert _words(cli.build_parser()) == list(cli.COMMANDS)


@pytest.mark.parametrize("word", list(cli.COMMANDS))
def test_a_command_help_is_the_same_as_in_the_parser_of_every_command(
    word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([word, "--help"]) == 0
    alone = capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([word, "--help"])
    together = capsys.readouterr()
    assert alone.out.startswith(f"usage: decisionflow {word}")
    assert (alone.out, alone.err) == (together.out, together.err)
