"""`interchange broker` config errors and wrong arguments, each explained in one line by its command."""
from __future__ import annotations

from pathlib import Path

import pytest

from interchange.app.cli import main


@pytest.mark.parametrize("content, suffix, expected", [
    (None, ".toml", "cannot read config"),
    ("name = ", ".toml", "is not valid TOML"),
    ("{", ".json", "is not valid JSON"),
    ('name = "x"\n[broker]\nport = 99999\n', ".toml", "broker.port"),
    ('name = "x"\n[[broker.sources]]\naddress = "s"\nmax_messages = 10\n', ".toml", "max_messages"),
    ('name = "x"\nunknown = 1\n', ".toml", "unknown"),
    ('name = "x"\n', ".toml", "nothing to listen on"),
    ('name = "x"\n[[broker.sources]]\naddress = "s"\nselector = "a ="\n', ".toml", "invalid selector"),
])
def test_broker_config_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           content: str | None, suffix: str, expected: str) -> None:
    path = tmp_path / f"node{suffix}"
    if content is not None:
        path.write_text(content)
    assert main(["broker", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err and "Traceback" not in err



@pytest.mark.parametrize("argv, command, wrong", [
    (["broker", "--config", "x.toml", "--bogus"], "broker", "--bogus"),
    (["audit", "validate", "--input", "x", "--output", "y", "--bogus"], "audit", "--bogus"),
    (["interop", "--target", "x"], "interop", "--target x"),
])
def test_wrong_argument_is_explained_by_its_command(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                    command: str, wrong: str) -> None:
    """The command's own usage (which lists its options), not the top-level one, names the wrong argument."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: interchange {command}" in err
    assert f"interchange {command}: error: unrecognized arguments: {wrong}" in err
