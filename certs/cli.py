"""``interchange pki ...``: the session-level PKI from the command line.

Every subcommand takes ``--dir PKI_DIR`` (also accepted before the subcommand; default ``./pki``,
``demo-data/pki`` for ``demo``). Refusals (missing PKI, unknown serial, invalid CN, more than
365 days for a leaf) are raised as :class:`~certs.errors.PkiError`: one line, exit status 2.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from certs.builders import MAX_LEAF_VALIDITY
from certs.errors import PkiError
from certs.keys import MIN_RSA_BITS, KeySpec
from certs.listing import format_listing
from certs.models import RevocationReason
from certs.names import parse_serial
from certs.pki import DEFAULT_CRL_DAYS, DEFAULT_LEAF_DAYS, DEFAULT_ROOT_CN, DEFAULT_ROOT_DAYS, IssuedIdentity, Pki
from certs.testpki import DEMO_ACTORS, DEMO_INTERCHANGES, create_test_pki

DEFAULT_DIR = "pki"
DEMO_DIR = "demo-data/pki"
REASONS: tuple[str, ...] = RevocationReason.__args__  # type: ignore[attr-defined]


def _add_dir(parser: argparse.ArgumentParser, default_text: str) -> None:
    parser.add_argument(
        "--dir", metavar="PKI_DIR", default=argparse.SUPPRESS,
        help=f"PKI directory (default: {default_text})",
    )


def _add_key_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key-type", choices=("ec", "rsa"), default="ec", help="key algorithm (default: ec, P-256)")
    parser.add_argument("--rsa-bits", type=int, default=2048, help=f"RSA key size, at least {MIN_RSA_BITS} (default: 2048)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pki`` and its subcommands to the ``interchange`` command line."""
    pki = subparsers.add_parser(
        "pki", help="session-level test PKI (chapter 5, appendix E)",
        description="Create and manage a session-level PKI: common root, intermediate CAs, "
        "interchange server and actor client certificates, revocations and CRLs.",
    )
    _add_dir(pki, f"./{DEFAULT_DIR}; {DEMO_DIR} for demo")
    pki.set_defaults(handler=run)
    sub = pki.add_subparsers(dest="pki_command", metavar="SUBCOMMAND", required=True)

    cmd = sub.add_parser("init-root", help="create the common TLS root CA (IP_115/116)")
    _add_dir(cmd, f"./{DEFAULT_DIR}")
    cmd.add_argument("--cn", default=DEFAULT_ROOT_CN, help=f"root common name (default: {DEFAULT_ROOT_CN!r})")
    cmd.add_argument("--days", type=int, default=DEFAULT_ROOT_DAYS, help=f"validity (default: {DEFAULT_ROOT_DAYS})")
    _add_key_options(cmd)

    cmd = sub.add_parser("add-intermediate", help="create an intermediate CA signed by the root (IP_117)")
    _add_dir(cmd, f"./{DEFAULT_DIR}")
    cmd.add_argument("--name", required=True, help="short CA name, e.g. a country code")
    cmd.add_argument("--cn", help="CA common name (default: derived from --name)")
    cmd.add_argument("--days", type=int, help="validity (default: 5 years, at most until the root expires)")
    _add_key_options(cmd)

    for name, what in (("issue-server", "an interchange server certificate"), ("issue-client", "an actor client certificate")):
        cmd = sub.add_parser(name, help=f"issue {what}")
        _add_dir(cmd, f"./{DEFAULT_DIR}")
        if name == "issue-server":
            cmd.add_argument("--cn", required=True, help="interchange FQDN = the SRV target name (IP_125)")
        else:
            cmd.add_argument("--cn", required=True, help="the actor's common name")
        cmd.add_argument("--ca", help="issuing intermediate CA (default: the only one)")
        cmd.add_argument("--days", type=int, default=DEFAULT_LEAF_DAYS, help="validity in days, at most 365 (IP_051)")
        _add_key_options(cmd)

    cmd = sub.add_parser("revoke", help="revoke a certificate and update its issuer's CRL")
    _add_dir(cmd, f"./{DEFAULT_DIR}")
    cmd.add_argument("serial", help="serial number, decimal or 0x-hex")
    cmd.add_argument("--reason", choices=REASONS, help="CRL reason code")

    cmd = sub.add_parser("crl", help="write fresh CRLs signed by the issuing CA")
    _add_dir(cmd, f"./{DEFAULT_DIR}")
    cmd.add_argument("--ca", help="only this CA ('root' or an intermediate's name; default: every CA)")
    cmd.add_argument("--days", type=int, default=DEFAULT_CRL_DAYS, help=f"nextUpdate in days (default: {DEFAULT_CRL_DAYS})")

    cmd = sub.add_parser("show", help="list CAs and issued certificates with their status")
    _add_dir(cmd, f"./{DEFAULT_DIR}")

    cmd = sub.add_parser("demo", help="create (or refresh) a complete test PKI for the quick-start demo")
    _add_dir(cmd, DEMO_DIR)
    cmd.add_argument("--interchange", action="append", metavar="FQDN",
                     help=f"interchange names (default: {', '.join(DEMO_INTERCHANGES)})")
    cmd.add_argument("--actor", action="append", metavar="CN", help=f"actor names (default: {', '.join(DEMO_ACTORS)})")


def _key_spec(args: argparse.Namespace) -> KeySpec:
    if args.key_type == "rsa" and args.rsa_bits < MIN_RSA_BITS:
        raise PkiError(f"--rsa-bits must be at least {MIN_RSA_BITS} (got {args.rsa_bits})")
    return KeySpec(args.key_type, args.rsa_bits)  # PkiError above 8192


def _leaf_days(days: int) -> int:
    if days > MAX_LEAF_VALIDITY.days:
        raise PkiError(
            f"--days {days} refused: client and server certificates are valid for at most "
            f"{MAX_LEAF_VALIDITY.days} days (IP_051)"
        )
    if days < 1:
        raise PkiError(f"--days must be at least 1 (got {days})")
    return days


def _describe(identity: IssuedIdentity) -> str:
    return (
        f"issued {identity.profile} certificate CN={identity.cn} serial {identity.serial:#x} "
        f"by CA {identity.issuer}, valid until {identity.not_after:%Y-%m-%d %H:%M} UTC\n"
        f"  key   {identity.key}\n  chain {identity.chain}\n  trust {identity.trust}"
    )


def run(args: argparse.Namespace) -> int:
    """Dispatch ``interchange pki SUBCOMMAND``; an OSError becomes a PkiError naming the file."""
    command: str = args.pki_command
    directory = Path(getattr(args, "dir", DEMO_DIR if command == "demo" else DEFAULT_DIR))
    pki = Pki(directory)
    try:
        return _COMMANDS[command](pki, args)
    except OSError as exc:  # e.g. permission denied while writing into the PKI directory
        where = f": {exc.filename}" if exc.filename else ""
        raise PkiError(f"{exc.strerror or exc}{where}") from None


def _init_root(pki: Pki, args: argparse.Namespace) -> int:
    record = pki.init_root(cn=args.cn, days=args.days, key_spec=_key_spec(args))
    print(f"created root CA CN={record.cn} serial {record.serial:#x} ({record.key}), "
          f"valid until {record.not_after:%Y-%m-%d} UTC")
    print(f"  trust list (IP_115/116): {pki.trust_bundle}")
    return 0


def _add_intermediate(pki: Pki, args: argparse.Namespace) -> int:
    record = pki.add_intermediate(args.name, cn=args.cn, days=args.days, key_spec=_key_spec(args))
    print(f"created intermediate CA {record.name!r} CN={record.cn} serial {record.serial:#x} "
          f"({record.key}), valid until {record.not_after:%Y-%m-%d} UTC")
    print(f"  CRL {pki.crl_path(record.name)}")
    return 0


def _issue_server(pki: Pki, args: argparse.Namespace) -> int:
    days = _leaf_days(args.days)
    print(_describe(pki.issue_server(args.cn, ca=args.ca, days=days, key_spec=_key_spec(args))))
    return 0


def _issue_client(pki: Pki, args: argparse.Namespace) -> int:
    days = _leaf_days(args.days)
    print(_describe(pki.issue_client(args.cn, ca=args.ca, days=days, key_spec=_key_spec(args))))
    return 0


def _revoke(pki: Pki, args: argparse.Namespace) -> int:
    result = pki.revoke(parse_serial(args.serial), reason=args.reason)
    print(f"revoked serial {result.serial:#x} (CN={result.cn}), issued by CA {result.ca}")
    print(f"  CRL updated: {result.crl}")
    return 0


def _crl(pki: Pki, args: argparse.Namespace) -> int:
    for path in pki.write_crl(args.ca, days=args.days):
        print(f"wrote {path}")
    return 0


def _show(pki: Pki, args: argparse.Namespace) -> int:
    print(format_listing(pki.load_state(), pki.directory))
    return 0


def _demo(pki: Pki, args: argparse.Namespace) -> int:
    made = create_test_pki(
        pki.directory,
        args.interchange or list(DEMO_INTERCHANGES),
        args.actor or list(DEMO_ACTORS),
        exist_ok=True,
    )
    print(f"test PKI in {made.directory}")
    print(f"  trust list (root only):   {made.trust_bundle}")
    print(f"  intermediate CA {made.intermediate!r}:   {made.intermediate_cert}")
    for crl in made.crls:
        print(f"  CRL:                      {crl}")
    for kind, identities in (("interchange", made.servers), ("actor", made.clients)):
        for cn, identity in identities.items():
            print(f"  {kind:<11} {cn:<24} {identity.directory}/{{chain,key,trust}}.pem  serial {identity.serial:#x}")
    return 0


_COMMANDS = {
    "init-root": _init_root,
    "add-intermediate": _add_intermediate,
    "issue-server": _issue_server,
    "issue-client": _issue_client,
    "revoke": _revoke,
    "crl": _crl,
    "show": _show,
    "demo": _demo,
}
