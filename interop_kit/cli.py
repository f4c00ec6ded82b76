"""``interchange interop``: run the conformance checks against an interchange, or ``--self``.

Exit status: 0 when no check failed (skips allowed), 1 when any failed, 2 for a usage error
(missing file, bad option, an --only/--skip pattern naming no check). Every check is bounded by
``--timeout`` seconds; the terminal shows one line per check and a summary, ``--junit`` and
``--json`` write the reports CI systems read.

``interchange interop prepare --pki DIR`` readies a test PKI for the refusal checks before the run
(:func:`interop_kit.badcerts.prepare`; its ``--help`` says what to install where).

``--self`` starts nodes in this process, which only the application shell can assemble: the shell
registers the command with its :data:`StartSelf` (``interchange.app.selfnode.start_self``).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from certs.errors import PkiError
from certs.tls import TlsFiles
from interchange.ground.errors import CliError
from interop_kit import badcerts
from interop_kit.catalogue import all_checks
from interop_kit.model import Check, Delivery, Report, Target, Traffic
from interop_kit.report import result_line, summary_lines, write_outputs
from interop_kit.runner import DEFAULT_TIMEOUT_S, SelectionError, run_checks, select


class SelfFederation(Protocol):
    """A local federation started for ``--self``: the kit checks its :attr:`target`."""

    @property
    def directory(self) -> Path: ...
    @property
    def nodes(self) -> Mapping[str, object]: ...
    @property
    def target(self) -> Target | None: ...
    async def close(self) -> None: ...


#: Starts the ``--self`` federation in a working directory.
StartSelf = Callable[[Path], Awaitable[SelfFederation]]

EPILOG = """examples:
  interchange interop --self --junit interop.xml
  interchange interop --name ixc.example.nl --ii-url https://ixc.example.nl:8443 --bi amqps://ixc.example.nl:5671 \\
      --trust trust.pem --cert chain.pem --key key.pem --domain example.nl --junit interop.xml --json interop.json
  interchange interop prepare --pki testpki    # before a run with --pki testpki: see `interop prepare --help`
  interchange interop --list"""

PREPARE_DESCRIPTION = """Issue the client certificates the target must refuse (the refusal checks tls.*.refuse-*)
from the test PKI in --pki DIR, and the CRL that revokes one of them.

What it writes, in DIR/interop-kit/:
  manifest.json              what was issued (the run reads it)
  certs/<kind>/              chain.pem + key.pem per certificate: valid (the control), expired,
                             not-yet-valid, wrong-eku, missing-intermediate, foreign-root,
                             revoked-<serial>
  foreign-pki/               the unrelated PKI of the foreign-root certificate
  install/root.pem           the root of DIR: the target must trust it for client certificates
  install/crl/<ca>.pem       every intermediate's CRL; <first CA>.pem lists the revoked certificate

Where the operator installs it: on the target, before the run: install/root.pem in the list of
roots it accepts client certificates from (if it is not there already), and install/crl/*.pem
where it reads its CRLs; then let the target load them (restart or reload it). The kit does not
expect a target to re-read a CRL during the run.

How the run finds it: `interchange interop ... --pki DIR` reads DIR/interop-kit/manifest.json. The
certificates stay usable for --days (the control's lifetime); preparing again keeps a set that is
still valid for a day and only copies the current CRLs again, so a target that loaded them stays
right. --renew issues a new set and revokes a new certificate (install the new CRL). Should the
target refuse an earlier revoked certificate but accept the newest, the revoked check is skipped
saying that the target's CRL is older than the revocation."""


class _AnyWord(dict[str, argparse.ArgumentParser]):
    """What argparse checks an action's name against: any word passes (see _OptionalAction)."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)


class _OptionalAction(argparse._SubParsersAction):  # noqa: SLF001 (argparse has no public subparsers action)
    """``interop``'s optional action: a word that names none (``interop --target x``) is reported
    with the other unrecognized arguments, as before ``prepare`` existed, not as a wrong action."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.choices = _AnyWord()  # the actions stay in _name_parser_map

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values[0] not in self._name_parser_map:
            vars(namespace).setdefault(argparse._UNRECOGNIZED_ARGS_ATTR, []).extend(values)  # noqa: SLF001
            return
        super().__call__(parser, namespace, values, option_string)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], start_self: StartSelf) -> None:
    parser = subparsers.add_parser("interop", help="conformance checks (TLS, DNS, II, BI) against an interchange",
                                   description=__doc__.split("\n\n")[0], epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_argument_group("target (or --self)")
    target.add_argument("--self", dest="self_test", action="store_true",
                        help="start a local two-node federation (the demo's) and check node A")
    target.add_argument("--self-dir", type=Path, help="working directory for --self (default: a temporary one)")
    target.add_argument("--name", help="the interchange's FQDN: certificate CN and SRV target (IP_125)")
    target.add_argument("--ii-url", help="II base URL, https://host:port[/base]")
    target.add_argument("--bi", help="BI endpoint, amqps://host:port")
    target.add_argument("--trust", type=Path, help="trust bundle: the common root (IP_115)")
    target.add_argument("--cert", type=Path, help="the kit's client certificate chain (an SRV target the interchange knows)")
    target.add_argument("--key", type=Path, help="its private key")
    target.add_argument("--address", help="connect to this address instead of resolving the host names")
    target.add_argument("--domain", help="trusted domain holding _ixc._tcp SRV records (DNS checks)")
    target.add_argument("--dns-server", help="DNS server HOST[:PORT] for the DNS checks (default: the system's)")
    target.add_argument("--pki", type=Path, help="a test PKI the target trusts for client certificates, readied with "
                        "`interchange interop prepare --pki DIR`: enables the certificate refusal checks")
    target.add_argument("--actor-cert", type=Path, help="a client certificate whose CN is no SRV target (IP_126)")
    target.add_argument("--actor-key", type=Path)
    target.add_argument("--delivery-address", help="BI target address of a delivery the kit may publish to")
    target.add_argument("--delivery-endpoint", help="amqps://host:port of the delivery (default: --bi)")
    target.add_argument("--delivery-cert", type=Path, help="the publishing actor's certificate chain")
    target.add_argument("--delivery-key", type=Path)
    target.add_argument("--traffic", type=Path, help='JSON {"selector", "matching": {props}, "mismatching": {props}}')
    run = parser.add_argument_group("run")
    run.add_argument("--only", action="append", default=[], metavar="NAME",
                     help="run only these checks (names or patterns, repeatable, comma-separated)")
    run.add_argument("--skip", action="append", default=[], metavar="NAME", help="leave these checks out (likewise)")
    run.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                     help=f"seconds per check (default {DEFAULT_TIMEOUT_S:g})")
    run.add_argument("--junit", type=Path, help="write a JUnit XML report here")
    run.add_argument("--json", type=Path, help="write a JSON report here")
    run.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.set_defaults(handler=functools.partial(main, start_self=start_self))
    actions = parser.add_subparsers(dest="interop_action", metavar="[prepare]", action=_OptionalAction,
                                    description="without an action the checks run; `prepare` readies --pki for them")
    prepare_parser = actions.add_parser("prepare", help="issue the refusal certificates and the CRL to install on the "
                                        "target before a run with --pki", description=PREPARE_DESCRIPTION,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
    prepare_parser.add_argument("--pki", type=Path, required=True, help="the test PKI (interchange pki init-root ...) "
                                "whose root the target trusts for client certificates")
    prepare_parser.add_argument("--days", type=int, default=badcerts.DEFAULT_DAYS,
                                help=f"lifetime of the certificates (default {badcerts.DEFAULT_DAYS}, at most "
                                     f"{badcerts.MAX_DAYS})")
    prepare_parser.add_argument("--renew", action="store_true", help="issue a new set even if the prepared one is "
                                "still valid (and revoke a new certificate)")
    prepare_parser.set_defaults(handler=prepare_main, command_parser=prepare_parser)


def prepare_main(args: argparse.Namespace) -> int:
    """``interchange interop prepare``: issue (or keep) the set and say what to install where."""
    try:
        prepared, issued = badcerts.prepare(args.pki, days=args.days, renew=args.renew)
    except (ValueError, PkiError, OSError) as exc:
        raise CliError(str(exc)) from None
    folder = badcerts.prepared_dir(args.pki)
    revoked = prepared.newest_revoked()
    state = "issued" if issued else "kept (still valid; --renew issues a new set)"
    print(f"refusal certificates {state} in {folder}, from CA {prepared.ca!r}, usable until "
          f"{prepared.valid_until:%Y-%m-%d %H:%M} UTC")
    print(f"revoked: {revoked.cn} serial {revoked.serial:#x}, listed from CRL number {revoked.crl_number} of "
          f"{revoked.ca!r} on")
    print("install on the target before the run, then let it load them:")
    print(f"  {folder / prepared.root}  (root to accept client certificates from)")
    for crl in prepared.crls:
        print(f"  {folder / crl}  (CRL)")
    print(f"then run: interchange interop ... --pki {args.pki}")
    return 0


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _endpoint(url: str, option: str) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"amqps://{url}")
    if not parts.hostname:
        raise CliError(f"{option} {url!r}: expected amqps://host:port")
    return parts.hostname, parts.port or 5671


def _files(cert: Path | None, key: Path | None, trust: Path, what: str) -> TlsFiles | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise CliError(f"{what}: give both the certificate and the key")
    files = TlsFiles(cert, key, trust)
    try:
        files.check()
    except FileNotFoundError as exc:
        raise CliError(str(exc)) from None
    return files


class TrafficFile(BaseModel):
    """``--traffic``: the subscription selector and the application properties of the two messages."""

    model_config = ConfigDict(extra="forbid")

    selector: str = Field(min_length=1)
    matching: dict[str, str | int | float | bool]
    mismatching: dict[str, str | int | float | bool] = Field(min_length=1)


def _traffic(path: Path | None) -> Traffic | None:
    if path is None:
        return None
    try:
        data = TrafficFile.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise CliError(f"--traffic {path}: {exc.strerror}") from None
    except ValidationError as exc:
        raise CliError(f"--traffic {path}: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None
    return Traffic(data.selector, dict(data.matching), dict(data.mismatching))


def target_from_args(args: argparse.Namespace) -> Target:
    missing = [o for o, v in (("--name", args.name), ("--ii-url", args.ii_url), ("--bi", args.bi),
                              ("--trust", args.trust), ("--cert", args.cert), ("--key", args.key)) if v is None]
    if missing:
        raise CliError(f"give {', '.join(missing)} (or --self)")
    if urlsplit(args.ii_url).scheme != "https":
        raise CliError(f"--ii-url {args.ii_url!r}: expected https://host:port[/base]")
    identity = _files(args.cert, args.key, args.trust, "--cert/--key")
    assert identity is not None
    bi_host, bi_port = _endpoint(args.bi, "--bi")
    delivery = None
    if args.delivery_address is not None:
        publisher = _files(args.delivery_cert, args.delivery_key, args.trust, "--delivery-cert/--delivery-key")
        if publisher is None:
            raise CliError("--delivery-address needs --delivery-cert and --delivery-key")
        host, port = _endpoint(args.delivery_endpoint, "--delivery-endpoint") if args.delivery_endpoint else (bi_host, bi_port)
        delivery = Delivery(publisher, args.delivery_address, host, port)
    dns_server, _, dns_port = (args.dns_server or "").partition(":")
    return Target(name=args.name, ii_url=args.ii_url, bi_host=bi_host, bi_port=bi_port, identity=identity,
                  address=args.address, domain=args.domain, dns_server=dns_server or None,
                  dns_port=int(dns_port) if dns_port.isdigit() else 53, pki=args.pki,
                  actor=_files(args.actor_cert, args.actor_key, args.trust, "--actor-cert/--actor-key"),
                  delivery=delivery, traffic=_traffic(args.traffic))


def _print_result(result: Any) -> None:
    print(result_line(result), flush=True)


async def _run(args: argparse.Namespace, checks: list[Check], workdir: Path, start_self: StartSelf) -> Report:
    if not args.self_test:
        return await run_checks(checks, target_from_args(args), workdir, timeout_s=args.timeout, progress=_print_result)
    federation = await start_self(args.self_dir or workdir / "self")
    try:
        assert federation.target is not None
        print(f"--self: federation of {', '.join(federation.nodes)} in {federation.directory}; checking "
              f"{federation.target.name}", flush=True)
        return await run_checks(checks, federation.target, workdir, timeout_s=args.timeout, progress=_print_result)
    finally:
        await federation.close()


def main(args: argparse.Namespace, start_self: StartSelf) -> int:
    try:
        checks = select(all_checks(), _split(args.only), _split(args.skip))
    except SelectionError as exc:
        raise CliError(str(exc)) from None
    if args.list:
        for check in checks:
            print(f"{check.name:34} [{check.requirement}]  {check.summary}")
        return 0
    if args.timeout <= 0:
        raise CliError("--timeout must be positive")
    with tempfile.TemporaryDirectory(prefix="interop-kit-") as scratch:
        try:
            report = asyncio.run(_run(args, checks, Path(scratch), start_self))
        except OSError as exc:
            raise CliError(f"cannot run: {exc}") from None
    write_outputs(report, args.junit, args.json)
    for line in summary_lines(report):
        print(line)
    sys.stdout.flush()
    return 1 if report.failed else 0
