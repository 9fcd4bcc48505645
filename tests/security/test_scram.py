"""SCRAM (RFC 5802/7677) as pure state machines: RFC 7677's test vector, both mechanisms, and
every way the exchange must fail — with a named error, never a crash."""

import base64

import pytest
from rafka.security.scram import (
    MAX_ITERATIONS,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    derive_credential,
)
from rafka.wire.errors import SaslAuthenticationFailedError

# RFC 7677 section 3
USER, PASSWORD = "user", "pencil"
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="



def lookup_for(cred: ScramCredential, user: str = USER):
    return lambda name: cred if name == user else None


def test_rfc7677_client_side():
    c = ScramClient("SCRAM-SHA-256", USER, PASSWORD, nonce=CLIENT_NONCE)
    assert c.first_message() == CLIENT_FIRST
    assert c.final_message(SERVER_FIRST) == CLIENT_FINAL
    c.verify(SERVER_FINAL)


def test_rfc7677_server_side_from_a_stored_credential():
    cred = derive_credential("SCRAM-SHA-256", PASSWORD, salt=SALT, iterations=4096)
    s = ScramServer("SCRAM-SHA-256", lookup_for(cred), nonce=SERVER_NONCE)
    assert s.receive_client_first(CLIENT_FIRST) == SERVER_FIRST
    assert s.receive_client_final(CLIENT_FINAL) == SERVER_FINAL
    assert s.authenticated and s.username == USER


def test_the_credential_holds_no_password():
    cred = derive_credential("SCRAM-SHA-256", PASSWORD)
    blob = repr(cred).encode() + cred.salt + cred.stored_key + cred.server_key
    assert PASSWORD.encode() not in blob
    assert derive_credential("SCRAM-SHA-256", PASSWORD).salt != cred.salt  # fresh salt each time


def exchange(mech: str, password: str, cred: ScramCredential, user: str = USER) -> ScramServer:
    c = ScramClient(mech, user, password)
    s = ScramServer(mech, lookup_for(cred))
    final = c.final_message(s.receive_client_first(c.first_message()))
    c.verify(s.receive_client_final(final))
    return s


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_both_mechanisms(mech):
    s = exchange(mech, "s3cr=t,pw", derive_credential(mech, "s3cr=t,pw"))
    assert s.authenticated


def test_user_names_with_comma_and_equals_are_escaped():
    cred = derive_credential("SCRAM-SHA-256", "pw")
    c = ScramClient("SCRAM-SHA-256", "a,b=c", "pw")
    first = c.first_message()
    assert b"n=a=2Cb=3Dc," in first
    s = ScramServer("SCRAM-SHA-256", lookup_for(cred, "a,b=c"))
    c.verify(s.receive_client_final(c.final_message(s.receive_client_first(first))))
    assert s.username == "a,b=c"


def test_wrong_password_fails_with_a_named_error():
    cred = derive_credential("SCRAM-SHA-256", "right")
    with pytest.raises(SaslAuthenticationFailedError, match="authentication failed"):
        exchange("SCRAM-SHA-256", "wrong", cred)


def test_unknown_user_looks_like_a_wrong_password():
    cred = derive_credential("SCRAM-SHA-256", "pw")
    s1 = ScramServer("SCRAM-SHA-256", lambda name: None)
    first = s1.receive_client_first(b"n,,n=nobody,r=abc")
    s2 = ScramServer("SCRAM-SHA-256", lambda name: None)
    again = s2.receive_client_first(b"n,,n=nobody,r=abc")
    salt = lambda m: m.split(b",s=")[1].split(b",")[0]  # noqa: E731
    assert salt(first) == salt(again)  # a stable fake salt: probing cannot tell
    with pytest.raises(ScramError, match="authentication failed"):
        exchange("SCRAM-SHA-256", "pw", cred, user="nobody")


def test_a_credential_of_the_other_mechanism_does_not_authenticate():
    cred = derive_credential("SCRAM-SHA-512", "pw")
    with pytest.raises(ScramError):
        exchange("SCRAM-SHA-256", "pw", cred)


def test_a_server_without_the_credential_cannot_fool_the_client():
    c = ScramClient("SCRAM-SHA-256", USER, PASSWORD, nonce=CLIENT_NONCE)
    c.first_message()
    c.final_message(SERVER_FIRST)
    with pytest.raises(ScramError, match="signature"):
        c.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("msg", [
    b"", b"garbage", b"p=tls-unique,,n=u,r=x", b"n,a=admin,n=u,r=x", b"n,,r=x", b"n,,n=u",
    b"n,,n=u=ZZ,r=x", b"n,,m=ext,n=u,r=x", b"\xff\xfe", b"n,,n=u,r=" + b"x" * 5000,
])
def test_malformed_client_first_is_refused(msg):
    s = ScramServer("SCRAM-SHA-256", lambda name: None)
    with pytest.raises(ScramError):
        s.receive_client_first(msg)
    with pytest.raises(ScramError):  # and the exchange is over
        s.receive_client_first(CLIENT_FIRST)


def test_client_final_with_another_nonce_or_binding_is_refused():
    cred = derive_credential("SCRAM-SHA-256", PASSWORD, salt=SALT)
    for final in (CLIENT_FINAL.replace(b"r=rOpr", b"r=XOpr"), CLIENT_FINAL.replace(b"c=biws", b"c=eSws=="),
                  b"c=biws,r=" + CLIENT_NONCE.encode() + SERVER_NONCE.encode()):
        s = ScramServer("SCRAM-SHA-256", lookup_for(cred), nonce=SERVER_NONCE)
        s.receive_client_first(CLIENT_FIRST)
        with pytest.raises(ScramError):
            s.receive_client_final(final)


def test_client_refuses_a_server_asking_too_many_iterations():
    c = ScramClient("SCRAM-SHA-256", USER, PASSWORD, nonce=CLIENT_NONCE)
    c.first_message()
    with pytest.raises(ScramError, match="iterations"):
        c.final_message(SERVER_FIRST.replace(b"i=4096", f"i={MAX_ITERATIONS * 100}".encode()))


def test_client_refuses_a_nonce_that_does_not_extend_its_own():
    c = ScramClient("SCRAM-SHA-256", USER, PASSWORD, nonce=CLIENT_NONCE)
    c.first_message()
    with pytest.raises(ScramError, match="nonce"):
        c.final_message(SERVER_FIRST.replace(b"r=rOpr", b"r=XXpr"))


def test_bad_parameters():
    with pytest.raises(ScramError, match="unsupported"):
        derive_credential("SCRAM-MD5", "pw")
    with pytest.raises(ScramError, match="iterations"):
        derive_credential("SCRAM-SHA-256", "pw", iterations=10)
    with pytest.raises(ScramError, match="empty"):
        derive_credential("SCRAM-SHA-256", "")


def test_librdkafka_before_2_6_1_client_final_nonce_is_taken():
    """librdkafka < 2.6.1 (kcat 1.7.1's 2.0.2) sends its nonce again before the server's r=
    (librdkafka PR 4895); the proof is over the message as sent, so it verifies."""
    import hashlib
    import hmac

    from rafka.security.scram import salted_password

    cred = derive_credential("SCRAM-SHA-256", PASSWORD, salt=SALT)
    s = ScramServer("SCRAM-SHA-256", lookup_for(cred), nonce=SERVER_NONCE)
    server_first = s.receive_client_first(CLIENT_FIRST)
    without_proof = f"c=biws,r={CLIENT_NONCE}{CLIENT_NONCE}{SERVER_NONCE}"
    auth = f"{CLIENT_FIRST[3:].decode()},{server_first.decode()},{without_proof}".encode()
    salted = salted_password("SCRAM-SHA-256", PASSWORD, SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    sig = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig, strict=True)))
    assert s.receive_client_final(without_proof.encode() + b",p=" + proof).startswith(b"v=")
    # the client nonce three times, or the server's nonce alone, are still refused
    for nonce in (CLIENT_NONCE * 3 + SERVER_NONCE, SERVER_NONCE):
        s = ScramServer("SCRAM-SHA-256", lookup_for(cred), nonce=SERVER_NONCE)
        s.receive_client_first(CLIENT_FIRST)
        with pytest.raises(ScramError, match="nonce"):
            s.receive_client_final(f"c=biws,r={nonce},p={proof.decode()}".encode())


def test_verify_password_against_the_stored_credential():
    from rafka.security.scram import verify_password

    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        cred = derive_credential(mech, PASSWORD)
        assert verify_password(cred, PASSWORD)
        assert not verify_password(cred, PASSWORD + "x")
        assert not verify_password(cred, "")
