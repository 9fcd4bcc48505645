"""Kafka's SCRAM user APIs (DescribeUserScramCredentials 50, AlterUserScramCredentials 51) on
rafka's native ones — what ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[…]'`` and the
AdminClients' ``alter_user_scram_credentials`` use to create users.

Theory of operation
-------------------
Kafka names a mechanism by a number (1 SCRAM-SHA-256, 2 SCRAM-SHA-512, 0 unknown) and an
upsertion carries ``SaltedPassword`` (``Hi(password, salt, i)``), never the password. rafka
stores ``StoredKey`` and ``ServerKey`` (``security/scram.py``): both are derived from the
salted password here, on the broker, and the salted password goes no further — the
controller's ``UserScramCredential`` record is the same as for ``rafka user add``.

Kafka answers **one result per user**, and a user's alterations apply all or none. So the
entries are checked here first, per user: an unknown mechanism is UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096–16384 or an empty salted password / salt UNACCEPTABLE_CREDENTIAL,
the same user and mechanism twice DUPLICATE_RESOURCE; a user with any such entry is
answered with that error and none of its entries is sent. The rest go to the controller in one
native ALTER_USER_SCRAM_CREDENTIALS, whose per-entry outcomes are folded back to the first
error of each user (deleting a credential that does not exist: RESOURCE_NOT_FOUND). The native
request is one controller decision, so a user's entries that all pass the checks here are
decided together with the others' — a controller-side refusal of one (a salt outside 8–128
bytes) leaves that user's other entries of the same request applied; the error says which.

Describe: ``users`` null or empty lists every user with a credential; a named user without one
is RESOURCE_NOT_FOUND, a name asked twice DUPLICATE_RESOURCE (Kafka's answers).
"""

from __future__ import annotations

from typing import Any

from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import KafkaContext, call_native, kafka_error
from rafka.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, stored_and_server_key
from rafka.wire.protocol import ApiKey

__all__ = ["describe_user_scram_credentials", "alter_user_scram_credentials",
           "MECHANISM_NUMBERS"]

UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93

# Kafka's ScramMechanism numbering (org.apache.kafka.clients.admin.ScramMechanism)
MECHANISM_NUMBERS: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_NUMBER_OF = {name: num for num, name in MECHANISM_NUMBERS.items()}


def _refusal(mech: int, *, iterations: int | None = None, salt: bytes | None = None,
             salted: bytes | None = None) -> tuple[int, str] | None:
    if mech not in MECHANISM_NUMBERS:
        return UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {mech} (1 SHA-256, 2 SHA-512)"
    if iterations is not None and not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        return (UNACCEPTABLE_CREDENTIAL,
                f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}")
    if salted is not None and (not salted or not salt):
        return UNACCEPTABLE_CREDENTIAL, "the salt and the salted password must not be empty"
    return None


async def alter_user_scram_credentials(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    order: list[str] = []  # users in the order the request first names them
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, int]] = set()
    entries: list[tuple[str, str, dict[str, Any] | None]] = []  # (kind, user, upsert fields)

    def check(user: str, mech: int, problem: tuple[int, str] | None) -> bool:
        if user not in order:
            order.append(user)
        if problem is None and (user, mech) in seen:
            problem = DUPLICATE_RESOURCE, f"{MECHANISM_NUMBERS[mech]} of {user!r} twice in one request"
        seen.add((user, mech))
        if problem is not None and user not in errors:
            errors[user] = problem
        return problem is None

    for u in b.upsertions:
        mech = int(u.mechanism)
        if check(u.name, mech, _refusal(mech, iterations=int(u.iterations), salt=u.salt,
                                         salted=u.salted_password)):
            name = MECHANISM_NUMBERS[mech]
            stored, server = stored_and_server_key(name, bytes(u.salted_password))
            entries.append(("upsert", u.name, {
                "user": u.name, "mechanism": name, "iterations": int(u.iterations),
                "salt": bytes(u.salt), "stored_key": stored, "server_key": server}))
    for d in b.deletions:
        if check(d.name, int(d.mechanism), _refusal(int(d.mechanism))):
            entries.append(("delete", d.name, {"user": d.name,
                                               "mechanism": MECHANISM_NUMBERS[int(d.mechanism)]}))
    sent = [(kind, user, body) for kind, user, body in entries if user not in errors]
    if sent:
        native = await call_native(ctx, req, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {
            "upsertions": [body for kind, _, body in sent if kind == "upsert"],
            "deletions": [body for kind, _, body in sent if kind == "delete"]})
        # the native answer lists upsertions first, then deletions (kraft/scram_admin.py)
        in_native_order = ([s for s in sent if s[0] == "upsert"]
                           + [s for s in sent if s[0] == "delete"])
        answers = native.get("results") or []
        for k, (_, user, _) in enumerate(in_native_order):
            a = answers[k] if k < len(answers) else native
            err = kafka_error(a.get("error"))
            if err and user not in errors:
                errors[user] = (err, a.get("message") or "")
    return {"throttle_time": 0, "results": [
        {"user": user, "error_code": errors.get(user, (0, None))[0],
         "error_message": errors.get(user, (0, None))[1]} for user in order]}


async def describe_user_scram_credentials(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    asked = list(req.body.users or [])
    names = [u.name for u in asked]
    dup = {n for n in names if names.count(n) > 1}
    native = await call_native(ctx, req, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                               {"users": sorted(set(names) - dup) if names else None})
    err = kafka_error(native.get("error"))
    if err:
        return {"throttle_time": 0, "error_code": err, "error_message": native.get("message"),
                "results": []}
    found = {u["user"]: u for u in native.get("users") or []}
    results = []
    for name in (names if names else sorted(found)):
        if name in dup:
            if all(r["user"] != name for r in results):
                results.append({"user": name, "error_code": DUPLICATE_RESOURCE,
                                "error_message": f"user {name!r} asked for twice",
                                "credential_infos": []})
            continue
        u = found.get(name)
        if u is None or kafka_error(u.get("error")):
            results.append({"user": name, "error_code": RESOURCE_NOT_FOUND,
                            "error_message": f"user {name!r} has no SCRAM credential",
                            "credential_infos": []})
            continue
        results.append({"user": name, "error_code": 0, "error_message": None, "credential_infos": [
            {"mechanism": _NUMBER_OF[c["mechanism"]], "iterations": c["iterations"]}
            for c in u.get("credentials") or [] if c["mechanism"] in _NUMBER_OF]})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}
