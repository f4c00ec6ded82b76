"""Runs checks in order, each bounded by a timeout, and turns exceptions into outcomes.

A check passes when it returns (its message says what was seen), fails on CheckFailed or on any
unexpected exception (reported with its type, never a traceback on the terminal), is skipped on
CheckSkipped, and fails when it exceeds its time budget. ``--only``/``--skip`` take check names or
shell-style patterns (``tls.*``); a pattern that names no check is an error, so a typo in a CI
file cannot silently run nothing.
"""
from __future__ import annotations

import asyncio
import fnmatch
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from interop_kit.model import Check, CheckFailed, CheckResult, CheckSkipped, Findings, Outcome, Report, Target

DEFAULT_TIMEOUT_S = 20.0


class SelectionError(ValueError):
    """An --only/--skip pattern matches no check."""


def select(checks: Sequence[Check], only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Check]:
    """The checks named by ``only`` (all when empty) minus those named by ``skip``, in catalogue order."""
    names = [check.name for check in checks]
    for pattern in (*only, *skip):
        if not fnmatch.filter(names, pattern):
            raise SelectionError(f"{pattern!r} names no check; see --list")

    def chosen(name: str) -> bool:
        wanted = not only or any(fnmatch.fnmatchcase(name, p) for p in only)
        return wanted and not any(fnmatch.fnmatchcase(name, p) for p in skip)

    return [check for check in checks if chosen(check.name)]


async def run_check(check: Check, target: Target, findings: Findings, timeout_s: float) -> CheckResult:
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            message = await check.run(target, findings)
        outcome = Outcome.PASSED
    except CheckFailed as exc:
        outcome, message = Outcome.FAILED, str(exc)
    except CheckSkipped as exc:
        outcome, message = Outcome.SKIPPED, str(exc)
    except TimeoutError:
        outcome, message = Outcome.FAILED, f"no result within {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001 - any error of the target or the kit is this check's failure
        outcome, message = Outcome.FAILED, f"{type(exc).__name__}: {exc}"
    return CheckResult(name=check.name, group=check.group, requirement=check.requirement, summary=check.summary,
                       outcome=outcome, message=message, duration_s=round(time.monotonic() - started, 3))


async def run_checks(checks: Sequence[Check], target: Target, workdir: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                     progress: Callable[[CheckResult], None] | None = None) -> Report:
    """Run ``checks`` one after another (later ones use what earlier ones found) into a Report."""
    started, clock = datetime.now(timezone.utc), time.monotonic()
    findings = Findings(workdir)
    results = []
    for check in checks:
        result = await run_check(check, target, findings, timeout_s)
        results.append(result)
        if progress is not None:
            progress(result)
    return Report(target=target.name, ii_url=target.ii_url, bi_endpoint=f"amqps://{target.bi_host}:{target.bi_port}",
                  started=started.isoformat(timespec="seconds"), duration_s=round(time.monotonic() - clock, 3),
                  results=results)
