"""``python -m support``: every command's ``--help`` runs, from the command's own module in
support/commands/, and says what the overview says of it."""
from __future__ import annotations

import pytest

from support import cli


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_commands_help_runs(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {cli.PROG} {command}"), out[:200]
    # argparse wraps the description: compare it word for word
    assert " ".join(cli.COMMANDS[command][1].split()) in " ".join(out.split())


def test_the_overview_lists_every_command_once(capsys):
    assert cli.main(["--help"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()
              if line.startswith("  ")]
    assert listed == list(cli.COMMANDS)
