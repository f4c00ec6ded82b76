"""REST client against the simulator over real HTTPS: every session kind, TLC lists, every refusal
surfaced with its status and body (TLEX 5.2, UDAP 2.2, TLEX 6.3.3 refusal rules)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from certs.tls import web_client_context
from interchange.bridges.tlex.models import RequestDetails
from interchange.bridges.tlex.rest import ServiceError, ServiceUnreachable, StreamingServiceClient, session_request
from interchange.testing.tlex_harness import DOMAIN, TLCS, Sim


async def test_broker_session_lifecycle(sim: Sim) -> None:
    async with sim.api(sim.broker) as api:
        session = await api.create_session(session_request(DOMAIN, "broker", list(TLCS[:2])))
        assert (session.type, session.protocol, session.mode()) == ("Broker", "TCPStreaming_Multiplex", "broker")
        details = session.details
        assert details.identifiers() == list(TLCS[:2])
        assert details.listener.port == sim.service.registry.listeners["TLSv1.2"][1]
        assert details.keep_alive_timeout == timedelta(seconds=1.5)
        assert timedelta(0) < details.listener.expiration - datetime.now(timezone.utc) <= timedelta(seconds=2)
        assert [s.token for s in await api.list_sessions()] == [session.token]
        assert (await api.get_session(session.token)).details.identifiers() == list(TLCS[:2])
        updated = await api.update_session(session.token, RequestDetails.model_validate(
            {"securityMode": "TLSv1.2", "tlcIdentifiers": [TLCS[0], TLCS[2]]}))
        assert updated.details.identifiers() == [TLCS[0], TLCS[2]]
        with pytest.raises(ServiceError) as missing:
            await api.get_session("no-such-token")
        assert missing.value.status == 404 and '"error": "no active session with this token"' in missing.value.body


async def test_tlc_sessions_and_registrations(sim: Sim) -> None:
    async with sim.api(sim.tlc_system) as api:
        single = await api.create_session(session_request(DOMAIN, "singleplex", [TLCS[0]]))
        assert single.mode() == "singleplex" and single.details.tlc_identifier == TLCS[0]
        multi = await api.create_session(session_request(DOMAIN, "multiplex", [TLCS[1], TLCS[2]]))
        assert multi.mode() == "multiplex"
        tlcs = await api.list_tlcs()
        assert sorted(t.identifier for t in tlcs) == sorted(TLCS)
        assert (await api.get_tlc(tlcs[0].uuid)) == tlcs[0]
        with pytest.raises(ServiceError) as conflict:  # UDAP 3.3.3.1/2: one TLC session per identifier
            await api.create_session(session_request(DOMAIN, "singleplex", [TLCS[0]]))
        assert conflict.value.status == 409 and TLCS[0] in conflict.value.body
        with pytest.raises(ServiceError) as unknown:
            await api.get_tlc("00000000-0000-0000-0000-000000000000")
        assert unknown.value.status == 404


async def test_monitor_session(sim: Sim) -> None:
    async with sim.api(sim.monitor) as api:
        monitor = await api.create_session(session_request(DOMAIN, "monitor", list(TLCS)))
        assert (monitor.type, monitor.mode()) == ("Monitor", "monitor")
        with pytest.raises(ServiceError) as again:  # 6.3.3.4: not twice within the account
            await api.create_session(session_request(DOMAIN, "monitor", [TLCS[0]]))
        assert again.value.status == 409


async def test_broker_refusals(sim: Sim) -> None:
    async with sim.api(sim.broker) as api, sim.api(sim.other_broker) as other:
        await api.create_session(session_request(DOMAIN, "broker", [TLCS[0]]))
        with pytest.raises(ServiceError) as same_account:  # 6.3.3.3
            await api.create_session(session_request(DOMAIN, "broker", [TLCS[0], TLCS[1]]))
        assert same_account.value.status == 409 and "NLZH0023" in same_account.value.body
        assert (await other.create_session(session_request(DOMAIN, "broker", [TLCS[0]]))).token  # other account: fine
        for request, status, text in [
            (session_request(DOMAIN, "singleplex", [TLCS[2]]), 403, "cannot create TLC sessions"),
            (session_request(DOMAIN, "broker", ["NLXX9999"]), 400, "not registered in domain"),
            (session_request("elsewhere", "broker", [TLCS[2]]), 400, "not registered in domain"),
        ]:
            with pytest.raises(ServiceError) as refused:
                await api.create_session(request)
            assert refused.value.status == status and text in refused.value.body
        vlog = session_request(DOMAIN, "broker", [TLCS[2]]).model_copy(update={"protocol": "VLOG"})
        with pytest.raises(ServiceError) as no_vlog:
            await api.create_session(vlog)
        assert no_vlog.value.status == 400 and "VLOG" in no_vlog.value.body


async def test_tlc_system_may_not_use_foreign_identifiers(sim: Sim) -> None:
    sim.service.registry.register_tlc(sim.broker, "NLBR0001", DOMAIN)  # some other account's controller
    async with sim.api(sim.tlc_system) as api:
        with pytest.raises(ServiceError) as foreign:
            await api.create_session(session_request(DOMAIN, "multiplex", ["NLBR0001"]))
        assert foreign.value.status == 403


async def test_bad_authorization_and_bad_body(sim: Sim) -> None:
    client = StreamingServiceClient(sim.service.api_url, "wrong", ssl_context=web_client_context(sim.pki.trust_bundle),
                                    server_hostname="tlex-sim.test")
    async with client as api:
        with pytest.raises(ServiceError) as unauthorised:
            await api.list_sessions()
        assert unauthorised.value.status == 401 and "X-Authorization" in unauthorised.value.body
    async with sim.api(sim.broker) as api:
        assert api._http is not None
        async with api._http.post(api.base_url + "/sessions", data=b"{not json", ssl=api._ssl,
                                  server_hostname="tlex-sim.test") as response:
            assert response.status == 400 and (await response.json()) == {"error": "request body is not JSON"}
        async with api._http.post(api.base_url + "/sessions", json={"domain": "test"}, ssl=api._ssl,
                                  server_hostname="tlex-sim.test") as response:
            assert response.status == 400 and "type: Field required" in (await response.json())["error"]


async def test_unreachable_service(sim: Sim) -> None:
    client = StreamingServiceClient("https://127.0.0.1:1/api/v1", "x", timeout=2.0)
    async with client as api:
        with pytest.raises(ServiceUnreachable):
            await api.list_tlcs()
    wrong_trust = StreamingServiceClient(sim.service.api_url, sim.broker.authorization, timeout=2.0,
                                         server_hostname="tlex-sim.test")  # system CAs do not know the test root
    async with wrong_trust as api:
        with pytest.raises(ServiceUnreachable, match="certificate"):
            await api.list_tlcs()


def test_request_models_refuse_bad_identifiers() -> None:
    with pytest.raises(ValueError, match="8 ASCII characters"):
        session_request(DOMAIN, "broker", ["SHORT"])
    with pytest.raises(ValueError, match="exactly one TLC identifier"):
        session_request(DOMAIN, "singleplex", list(TLCS[:2]))
    with pytest.raises(ValueError, match="unknown mode"):
        session_request(DOMAIN, "party", list(TLCS))
