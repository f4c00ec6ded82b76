"""`interchange quadtree`: tiles of a position or a circle from the command line."""
from __future__ import annotations

import pytest

from interchange.app.cli import main as interchange_main
from quadtree import cover_circle, format_property, selector_for_tiles


@pytest.fixture
def main():
    return interchange_main


@pytest.mark.parametrize(
    ("argv", "tile"),
    [
        (["69.111746", "20.749621"], "102231321102200323"),
        (["42.033415", "-8.65392"], "031332213323322232"),
        (["51.485992", "4.735311", "--zoom", "13"], "1202021301211"),
        (["--zoom", "5", "51.485992", "4.735311"], "12020"),
        (["-33.9", "-70.6", "--zoom", "3"], "210"),
    ],
)
def test_position(main, capsys: pytest.CaptureFixture[str], argv: list[str], tile: str) -> None:
    assert main(["quadtree", *argv]) == 0
    captured = capsys.readouterr()
    assert captured.out == tile + "\n"
    assert captured.err == ""


def test_position_property_and_selector(main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quadtree", "42.033415", "-8.65392", "--property"]) == 0
    assert capsys.readouterr().out == ",031332213323322232,\n"
    assert main(["quadtree", "42.033415", "-8.65392", "--selector"]) == 0
    assert capsys.readouterr().out == "quadTree LIKE '%,031332213323322232%'\n"


def test_circle_lists_tiles(main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quadtree", "--circle", "42.033415", "-8.65392", "5000", "--zoom", "13"]) == 0
    expected = cover_circle(42.033415, -8.65392, 5000, 13)
    assert capsys.readouterr().out.splitlines() == expected


def test_circle_default_zoom_is_13(main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quadtree", "--circle", "51.485992", "4.735311", "5000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == cover_circle(51.485992, 4.735311, 5000, 13)
    assert all(len(line) == 13 for line in lines)


def test_circle_property(main, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["quadtree", "--circle", "-16.5", "179.98", "10000", "--zoom", "12", "--property"]
    assert main(argv) == 0
    assert capsys.readouterr().out == format_property(cover_circle(-16.5, 179.98, 10000, 12)) + "\n"


def test_circle_selector(main, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["quadtree", "--circle", "51.485992", "4.735311", "20000", "--zoom", "14", "--selector"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out == selector_for_tiles(cover_circle(51.485992, 4.735311, 20000, 14)) + "\n"
    assert out.count("\n") == 1 and out.startswith("quadTree LIKE '%,")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["91", "0"], "latitude 91.0 is outside"),
        (["north", "0"], "latitude must be a number, got 'north'"),
        (["0", "east"], "longitude must be a number"),
        (["nan", "0"], "latitude must be a finite number"),
        (["0", "inf"], "longitude must be a finite number"),
        (["0", "181"], "longitude 181.0 is outside"),
        (["1", "2", "--zoom", "31"], "zoom must be between 0 and 30"),
        (["1", "2", "--zoom", "-1"], "zoom must be between 0 and 30"),
        (["1", "2", "--zoom", "x"], "--zoom must be an integer"),
        (["1", "2", "--zoom", "13.5"], "--zoom must be an integer"),
        ([], "give a position LAT LON or --circle"),
        (["1"], "give a position LAT LON or --circle"),
        (["1", "2", "--circle", "1", "2", "3"], "not both"),
        (["--circle", "1", "2", "-5"], "radius must be finite and >= 0"),
        (["--circle", "1", "2", "many"], "radius must be a number"),
        (["--circle", "86", "2", "5"], "latitude 86.0 is outside"),
        (["--circle", "0", "0", "1e9", "--zoom", "20"], "more than 1000000 tiles"),
        (["0", "0", "--zoom", "0", "--property"], "tile 0 is empty"),
    ],
)
def test_user_errors_are_one_line_with_status_2(
    main, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["quadtree", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("interchange quadtree: error: ")
    assert message in captured.err
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["--circle", "1", "2"],
        ["1", "2", "--property", "--selector"],
        ["1", "2", "--zoom"],
    ],
)
def test_usage_errors_are_one_line_with_status_2(
    main, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exc_info:
        main(["quadtree", *argv])
    assert exc_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("interchange quadtree: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["1", "2", "3"], ["1", "2", "--frobnicate"]])
def test_unrecognized_arguments_exit_2(
    main, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Extra arguments are reported by the top-level `interchange` parser."""
    with pytest.raises(SystemExit) as exc_info:
        main(["quadtree", *argv])
    assert exc_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and "Traceback" not in err
