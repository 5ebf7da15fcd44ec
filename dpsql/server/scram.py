"""The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677), as PostgreSQL's clients speak it.

The server keeps only a *verifier* per account, never the password: PostgreSQL's ``pg_authid`` format,
``SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>``. A stolen verifier does not
let its thief log in (the client must prove it knows ClientKey, of which StoredKey is only the hash), though it
does allow an offline dictionary attack on the password, as any password hash does.

Passwords are normalized by SASLprep (RFC 4013) where it applies, as libpq and PostgreSQL do, so a password
typed with a different Unicode form of the same characters still matches; a password SASLprep rejects (control
characters, unassigned code points) is used as its raw UTF-8 bytes, again as PostgreSQL does.

Channel binding is not offered: the client's GS2 header must be ``n,,`` (no binding) or ``y,,`` (the client
could bind but the server did not advertise it); ``p=...`` is refused.

An unknown user runs the same exchange against a mock verifier whose salt the server derives from the user
name (so asking twice gives the same salt, as it would for a real account) and fails only at the end, with the
same error a wrong password gets: whether an account exists is not revealed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import stringprep
import unicodedata
from dataclasses import dataclass

from dpsql.errors import Error

MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 16
NONCE_BYTES = 18
MAX_ITERATIONS = 10_000_000


class ScramError(Error):
    """A SCRAM-SHA-256 message is malformed (a protocol violation by the client, not a wrong password)."""


class AuthFailed(ScramError):
    """The client's proof does not match the verifier, or the user is unknown: the two are not told apart."""


class VerifierError(Error, ValueError):
    """A stored verifier text is malformed, or is a plain password rather than a SCRAM-SHA-256 verifier."""


@dataclass(frozen=True)
class Verifier:
    """One account's stored SCRAM-SHA-256 secret: what the server needs to check a proof, not the password."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def __str__(self) -> str:
        return (f"{MECHANISM}${self.iterations}:{_b64(self.salt)}"
                f"${_b64(self.stored_key)}:{_b64(self.server_key)}")


def saslprep(password: str) -> bytes:
    """The password's bytes for hashing: SASLprep (RFC 4013) of it, or its raw UTF-8 if SASLprep rejects it."""
    mapped = "".join(" " if stringprep.in_table_c12(c) else c for c in password if not stringprep.in_table_b1(c))
    normal = unicodedata.normalize("NFKC", mapped)
    prohibited = (stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3,
                  stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6, stringprep.in_table_c7,
                  stringprep.in_table_c8, stringprep.in_table_c9, stringprep.in_table_a1)
    bidi_ok = not any(map(stringprep.in_table_d1, normal)) or (
        stringprep.in_table_d1(normal[0]) and stringprep.in_table_d1(normal[-1])
        and not any(map(stringprep.in_table_d2, normal)))
    if any(test(c) for c in normal for test in prohibited) or not bidi_ok:
        return password.encode("utf-8", "surrogatepass")
    return normal.encode("utf-8")


def make_verifier(password: str, iterations: int = DEFAULT_ITERATIONS, *, salt: bytes | None = None) -> str:
    """A new verifier for ``password``, in PostgreSQL's ``pg_authid`` text format. The salt is random unless
    given (a fixed salt is for reproducing published test vectors, not for accounts)."""
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise VerifierError(f"SCRAM iterations must be between 1 and {MAX_ITERATIONS}, got {iterations}")
    return str(_derive(saslprep(password), salt or secrets.token_bytes(SALT_BYTES), iterations))


def parse_verifier(text: str) -> Verifier:
    """Read a verifier made by :func:`make_verifier` (or PostgreSQL); a clear :class:`VerifierError` otherwise."""
    if not text.startswith(MECHANISM + "$"):
        raise VerifierError(f"not a {MECHANISM} verifier (it must start with '{MECHANISM}$'; "
                            "a plain password is not accepted: make one with make_verifier)")
    try:
        params, keys = text[len(MECHANISM) + 1:].split("$")
        iterations, salt = params.split(":")
        stored, server = keys.split(":")
    except ValueError:
        raise VerifierError(f"malformed {MECHANISM} verifier: expected "
                            f"'{MECHANISM}$<iterations>:<salt>$<StoredKey>:<ServerKey>'") from None
    if not iterations.isdigit() or not 1 <= int(iterations) <= MAX_ITERATIONS:
        raise VerifierError(f"malformed {MECHANISM} verifier: iterations {iterations!r} is not an integer "
                            f"between 1 and {MAX_ITERATIONS}")
    out = Verifier(int(iterations), _unb64(salt, "salt"), _unb64(stored, "StoredKey"), _unb64(server, "ServerKey"))
    if not out.salt or len(out.stored_key) != 32 or len(out.server_key) != 32:
        raise VerifierError(f"malformed {MECHANISM} verifier: the salt is empty or a key is not 32 bytes")
    return out


def mock_verifier(salt: bytes) -> Verifier:
    """A verifier that no password matches, for an unknown user; ``salt`` should be stable per user name."""
    return Verifier(DEFAULT_ITERATIONS, salt, secrets.token_bytes(32), secrets.token_bytes(32))


class ScramExchange:
    """The server side of one SCRAM-SHA-256 exchange: :meth:`first` answers the client-first-message, then
    :meth:`final` checks the client's proof and returns the server-final-message, or raises :class:`AuthFailed`.

    ``verifier`` None is an unknown user: the exchange runs against a mock verifier (with ``mock_salt``, random
    if not given) and fails in :meth:`final` exactly as a wrong password does.
    """

    def __init__(self, verifier: Verifier | None, *, mock_salt: bytes | None = None) -> None:
        self._known = verifier is not None
        self._verifier = verifier or mock_verifier(mock_salt or secrets.token_bytes(SALT_BYTES))
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, client_first: bytes) -> bytes:
        """The server-first-message ``r=<nonce>,s=<salt>,i=<iterations>`` for the client-first-message."""
        if self._server_first:
            raise ScramError("SCRAM client-first-message sent twice")
        text = _text(client_first)
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or parts[1]:
            if parts[0].startswith("p="):
                raise ScramError("SCRAM channel binding was requested but is not offered by this server")
            raise ScramError("malformed SCRAM client-first-message: the GS2 header must be 'n,,' or 'y,,'")
        self._gs2_header = f"{parts[0]},,"
        self._client_first_bare = parts[2]
        attributes = parts[2].split(",")
        if len(attributes) < 2 or not attributes[0].startswith("n=") or not attributes[1].startswith("r="):
            raise ScramError("malformed SCRAM client-first-message: expected 'n=<user>,r=<nonce>'")
        client_nonce = attributes[1][2:]
        if not client_nonce or not all(0x21 <= ord(c) <= 0x7E and c != "," for c in client_nonce):
            raise ScramError("malformed SCRAM client-first-message: the nonce must be printable ASCII")
        if any(a.startswith("m=") for a in attributes[2:]):
            raise ScramError("SCRAM mandatory extensions (m=) are not supported")
        self._nonce = client_nonce + self._server_nonce()
        v = self._verifier
        self._server_first = f"r={self._nonce},s={_b64(v.salt)},i={v.iterations}"
        return self._server_first.encode()

    def _server_nonce(self) -> str:
        """The server's half of the nonce: fresh random bytes (a subclass may fix it to replay a test vector)."""
        return _b64(secrets.token_bytes(NONCE_BYTES))

    def final(self, client_final: bytes) -> bytes:
        """Check the client-final-message's proof; the server-final-message ``v=<signature>`` if it matches."""
        if not self._server_first:
            raise ScramError("SCRAM client-final-message before the client-first-message")
        text = _text(client_final)
        without_proof, sep, proof_text = text.rpartition(",p=")
        attributes = without_proof.split(",")
        if not sep or len(attributes) < 2 or not attributes[0].startswith("c=") or not attributes[1].startswith("r="):
            raise ScramError("malformed SCRAM client-final-message: expected 'c=<binding>,r=<nonce>,...,p=<proof>'")
        if attributes[0][2:] != _b64(self._gs2_header.encode()):
            raise ScramError("SCRAM channel-binding data does not match the client-first-message's GS2 header")
        if attributes[1][2:] != self._nonce:
            raise ScramError("SCRAM nonce does not match the one the server sent")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except binascii.Error:
            raise ScramError("malformed SCRAM client proof: not base64") from None
        if len(proof) != 32:
            raise ScramError("malformed SCRAM client proof: not 32 bytes")
        v = self._verifier
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(v.stored_key, auth_message, "sha256")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        matches = hmac.compare_digest(hashlib.sha256(client_key).digest(), v.stored_key)
        if not (matches and self._known):
            raise AuthFailed("password authentication failed")
        return b"v=" + _b64(hmac.digest(v.server_key, auth_message, "sha256")).encode()


def _derive(password: bytes, salt: bytes, iterations: int) -> Verifier:
    """StoredKey and ServerKey from the salted password (RFC 5802 section 3)."""
    salted = hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    return Verifier(iterations, salt, hashlib.sha256(client_key).digest(),
                    hmac.digest(salted, b"Server Key", "sha256"))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise VerifierError(f"malformed {MECHANISM} verifier: the {what} is not base64") from None


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("malformed SCRAM message: not UTF-8") from None
