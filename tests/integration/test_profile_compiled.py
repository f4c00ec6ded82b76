"""A changed profile is checked by validation and by the C accelerator built from it (its header
generated, _admit.c compiled as it is by the system's compiler) without a line of reader code; rules
across properties the C code cannot follow leave every message to Python (the rest of the profile's
tests: tests/unit/test_profile.py)."""
from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

from proton import Message

from interchange.broker import _admit
from interchange.broker.admit_header import header_text
from interchange.broker.validation import build_validator
from interchange.ground import profile
from interchange.ground.profile import TABLES, MessageType, Tables
from interchange.testing.profile_cases import cases, changed_tables, valid_sets

ADMIT_C = Path(_admit.__file__).with_name("_admit.c")


def encode(props: dict[str, object]) -> bytes:
    return Message(body=b"x", properties=props, inferred=True).encode()


def found(validate, props: dict[str, object]) -> list[tuple[str, str]]:
    return [(p.property, p.requirement) for p in validate(props)]


def compile_accelerator(tables: Tables, directory: Path) -> ModuleType:
    """_admit.c as it is, with the header ``tables`` generate, built and loaded as its own module."""
    shutil.copy(ADMIT_C, directory / "_admit.c")
    (directory / "_admit_profile.h").write_text(header_text(tables), encoding="utf-8")
    target = directory / f"_admit{sysconfig.get_config_var('EXT_SUFFIX')}"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    # the generated header beside the copy comes first ("..." includes); the shared ones from the package
    subprocess.run([*compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", f"-I{sysconfig.get_paths()['include']}",
                    f"-I{ADMIT_C.parent}",
                    str(directory / "_admit.c"), "-o", str(target)], check=True, capture_output=True, timeout=120)
    spec = importlib.util.spec_from_file_location("changed_profile._admit", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_changed_profile_is_checked_without_further_code(tmp_path: Path) -> None:
    tables = changed_tables()
    validate = build_validator(tables)
    accelerator = compile_accelerator(tables, tmp_path)
    changed = cases(tables)
    new = {"laneCount", "zoneIds", "detector", "road", "operatorId", "lane"}
    assert {case.expected[0] for case in changed} >= new | {"iviStatus"}
    assert found(validate, {**valid_sets(tables)[0], "iviStatus": 4}) == [("iviStatus", "IP_029")]
    handled = 0
    for case in changed:
        assert found(validate, case.props) == [case.expected], case.what
        result = accelerator.admit(encode(case.props), None)
        if "lane" in case.props:
            assert result is None, case.what  # left to the Python path
        else:
            assert result is not None and result[1] is False, case.what
            handled += 1
    assert handled > 60
    for props in valid_sets(tables):
        assert validate(props) == [], props
        result = accelerator.admit(encode(props), None)
        assert result is None if "lane" in props else (result is not None and result[1] is True), props
    # the profile's own accelerator refuses a CPM without the added mandatory laneCount: the changed one accepts it
    cpm = valid_sets(tables)[list(MessageType).index(MessageType.CPM)]
    assert accelerator.admit(encode(cpm), None)[1] is True
    assert _admit.admit(encode(cpm), None)[1] is False  # laneCount is no name of the profile's tables


def test_rules_across_properties_the_c_code_cannot_follow_leave_every_message_to_python(tmp_path: Path) -> None:
    tables = dataclasses.replace(TABLES, cross_rules=TABLES.cross_rules + (profile.PublicationIdRule("id", "name"),))
    accelerator = compile_accelerator(tables, tmp_path)
    validate = build_validator(tables)
    for props in valid_sets(tables):
        assert accelerator.admit(encode(props), None) is None
    props = {**valid_sets(tables)[0], "name": ",a,", "id": ",a,"}
    assert found(validate, props) == [("id", "IP_022")]  # Python follows the added rule
