"""RFC 7235: the auth scheme is case-insensitive. `bearer <token>` and `BEARER <token>` are the
token (they were refused), on every service: the retriever and the generator (HTTP, one
middleware) and the buffer (Flight); a wrong token stays refused whatever the case."""

from __future__ import annotations

import json

import pyarrow.flight as flight
import pytest

from areal_mem.security import token_matches

SCHEMES = ["Bearer", "bearer", "BEARER", "bEaReR"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_scheme_is_case_insensitive_and_the_token_is_not(scheme):
    assert token_matches(f"{scheme} s3cret", "s3cret")
    assert token_matches(f"{scheme}   s3cret", "s3cret")  # 1*SP
    for bad in (f"{scheme} S3CRET", f"{scheme} s3cretx", f"{scheme} ", scheme, f"{scheme}s3cret", "Basic s3cret"):
        assert not token_matches(bad, "s3cret"), bad


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_retriever_takes_any_case_of_the_scheme(retriever_service, scheme, checks):
    svc = retriever_service
    status, out = svc.call("GET", "/health", headers={"Authorization": f"{scheme} {svc.token}"}, auth=False)
    assert status == 200, out
    status, _ = svc.call("GET", "/health", headers={"Authorization": f"{scheme} {svc.token}x"}, auth=False)
    assert status == 401
    checks["retriever"](svc)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_buffer_takes_any_case_of_the_scheme(buffer_service, scheme):
    client = flight.FlightClient(buffer_service.url)
    try:
        good = flight.FlightCallOptions(
            timeout=20, headers=[(b"authorization", f"{scheme} {buffer_service.token}".encode())]
        )
        stats = json.loads(list(client.do_action(flight.Action("stats", b"{}"), good))[0].body.to_pybytes())
        assert "version" in stats
        bad = flight.FlightCallOptions(timeout=20, headers=[(b"authorization", f"{scheme} wrong".encode())])
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(client.do_action(flight.Action("stats", b"{}"), bad))
    finally:
        client.close()
