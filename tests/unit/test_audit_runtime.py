"""Which Java the audit JVM runs on and which archive it maps (spark/runtime.py): JDK 25 with its AOT cache when set
up, else the system's Java with its class data archive; ``CROADS_AUDIT_JAVA`` and ``CROADS_AUDIT_ARCHIVE`` override."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark.runtime import ARCHIVE_ENV, JAVA_OPTIONS, RUNTIME_ENV, Runtime, aot_options, java_home, select_runtime


def java_home_at(path: Path) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "java").write_text("#!/bin/sh\n")
    return path


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, str]:
    """A JDK 25 home, its AOT cache and the system Java's class archive, all present."""
    java_home_at(tmp_path / "jdk25")
    (tmp_path / "audit.aot").write_bytes(b"")
    (tmp_path / "audit-classes.jsa").write_bytes(b"")
    return {"jdk25_home": str(tmp_path / "jdk25"), "aot_cache": str(tmp_path / "audit.aot"),
            "class_archive": str(tmp_path / "audit-classes.jsa")}


def test_jdk25_with_its_aot_cache_when_set_up(layout: dict[str, str]) -> None:
    runtime = select_runtime({}, **layout)
    assert runtime == Runtime(layout["jdk25_home"], aot_options(layout["aot_cache"]))
    assert runtime.options().split() == [*JAVA_OPTIONS.split(), f"-XX:AOTCache={layout['aot_cache']}",
                                         "-Xlog:aot*=off", "-Xlog:cds*=off"]
    assert select_runtime({RUNTIME_ENV: "auto"}, **layout) == runtime
    assert select_runtime({RUNTIME_ENV: ""}, **layout) == runtime


def test_jdk25_without_a_cache_runs_without(layout: dict[str, str]) -> None:
    os.remove(layout["aot_cache"])
    runtime = select_runtime({}, **layout)
    assert runtime == Runtime(layout["jdk25_home"], "")
    assert runtime.options() == JAVA_OPTIONS


def test_the_system_java_with_its_class_archive_without_jdk25(layout: dict[str, str]) -> None:
    os.remove(os.path.join(layout["jdk25_home"], "bin", "java"))
    runtime = select_runtime({}, **layout)
    assert runtime.java_home is None  # JAVA_HOME / the path's java, as inherited
    assert runtime.options().split() == [*JAVA_OPTIONS.split(), f"-XX:SharedArchiveFile={layout['class_archive']}",
                                         "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    os.remove(layout["class_archive"])
    assert select_runtime({}, **layout) == Runtime(None, "")


def test_a_cluster_driver_keeps_the_system_java_unless_told(layout: dict[str, str], tmp_path: Path) -> None:
    runtime = select_runtime({}, **layout, local=False)  # its executors run the cluster's Java
    assert runtime.java_home is None
    assert f"-XX:SharedArchiveFile={layout['class_archive']}" in runtime.options().split()
    assert select_runtime({RUNTIME_ENV: layout["jdk25_home"]}, **layout, local=False).java_home == layout["jdk25_home"]


def test_system_chosen_by_the_environment(layout: dict[str, str]) -> None:
    runtime = select_runtime({RUNTIME_ENV: "system"}, **layout)
    assert runtime.java_home is None
    assert f"-XX:SharedArchiveFile={layout['class_archive']}" in runtime.options().split()


def test_archive_env_leaves_every_archive_out(layout: dict[str, str]) -> None:
    assert select_runtime({ARCHIVE_ENV: "0"}, **layout) == Runtime(layout["jdk25_home"], "")
    assert select_runtime({ARCHIVE_ENV: "0", RUNTIME_ENV: "system"}, **layout) == Runtime(None, "")
    assert select_runtime({ARCHIVE_ENV: "1"}, **layout).archive_options == aot_options(layout["aot_cache"])


def test_another_java_home_runs_without_the_cache_of_jdk25(layout: dict[str, str], tmp_path: Path) -> None:
    other = java_home_at(tmp_path / "other-jdk")
    assert select_runtime({RUNTIME_ENV: str(other)}, **layout) == Runtime(str(other), "")
    # the JDK 25 home named by another path to it: still its cache
    link = tmp_path / "link-to-jdk25"
    link.symlink_to(layout["jdk25_home"])
    assert select_runtime({RUNTIME_ENV: str(link)}, **layout).archive_options == aot_options(layout["aot_cache"])


def test_a_java_home_without_java_is_refused(layout: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no bin/java"):
        select_runtime({RUNTIME_ENV: str(tmp_path / "nowhere")}, **layout)


def test_java_home_is_set_within_the_block_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", "/usr/lib/jvm/java-17")
    with java_home("/opt/jdk25"):
        assert os.environ["JAVA_HOME"] == "/opt/jdk25"
    assert os.environ["JAVA_HOME"] == "/usr/lib/jvm/java-17"
    monkeypatch.delenv("JAVA_HOME")
    with pytest.raises(RuntimeError), java_home("/opt/jdk25"):
        assert os.environ["JAVA_HOME"] == "/opt/jdk25"
        raise RuntimeError("the session failed to start")
    assert "JAVA_HOME" not in os.environ
    with java_home(None):  # the inherited Java: nothing set
        assert "JAVA_HOME" not in os.environ

