"""The readable listing printed by ``interchange pki show``."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from certs.models import CertRecord, PkiState


def _when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")


def _status(record: CertRecord, now: datetime) -> str:
    status = record.status(now)
    if record.revocation is not None:
        reason = f", {record.revocation.reason}" if record.revocation.reason else ""
        return f"revoked {_when(record.revocation.at)}{reason}"
    return status


def _line(kind: str, record: CertRecord, now: datetime, indent: str = "") -> str:
    return (
        f"{indent}{kind:<8} {record.cn}\n"
        f"{indent}         serial {record.serial:#x}  {record.key}\n"
        f"{indent}         {_when(record.not_before)} .. {_when(record.not_after)} UTC  "
        f"[{_status(record, now)}]"
    )


def format_listing(state: PkiState, directory: Path, now: datetime | None = None) -> str:
    """CAs with the certificates they issued: CN, serial, validity, status (valid/revoked/expired)."""
    moment = now or datetime.now(timezone.utc)
    lines = [f"PKI {directory}  (trust list: {directory / 'trust.pem'})", ""]
    lines.append(_line("root", state.root, moment) + f"  CRL #{state.root.crl_number}")
    newest: dict[str, int] = {}
    for record in state.issued:
        newest[record.cn] = record.serial
    for name in sorted(state.intermediates):
        ca = state.intermediates[name]
        lines.append("")
        lines.append(_line(f"CA {name}", ca, moment, "  ") + f"  CRL #{ca.crl_number}")
        children = [record for record in state.issued if record.issuer == name]
        if not children:
            lines.append("    (no certificates issued)")
        for record in children:
            replaced = "" if newest[record.cn] == record.serial else "  (replaced by a newer certificate)"
            lines.append(_line(record.profile, record, moment, "    ") + replaced)
    if not state.intermediates:
        lines += ["", "  (no intermediate CA: run add-intermediate)"]
    return "\n".join(lines)
