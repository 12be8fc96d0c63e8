"""``--help`` is terminal text: no reStructuredText markup, no doubled ``%``."""

from __future__ import annotations

import argparse
import re

import pytest

from flows.cli import COMMANDS, build_parser
from flows.deployments import main as deployments_main

MARKUP = re.compile(r"``|:(?:mod|func|class|meth|attr):`|%%")


def _subparser(name: str) -> argparse.ArgumentParser:
    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0].choices[name]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_help_has_no_markup(command):
    text = _subparser(command).format_help()
    assert MARKUP.findall(text) == [], text


def test_markup_is_unwrapped_not_dropped():
    assert (
        "poem-pipeline retrain: run the retrain flow once." in _subparser("retrain").format_help()
    )
    assert "The work is done by flows.closed_loop." in _subparser("simulate").format_help()
    assert "on 5% of a supervised training set" in _subparser("make-logs").format_help()


def test_deployment_help_has_no_markup(capsys):
    with pytest.raises(SystemExit):
        deployments_main(["--help"])
    text = capsys.readouterr().out
    assert MARKUP.findall(text) == [] and "runs the retrain flow" in text, text
