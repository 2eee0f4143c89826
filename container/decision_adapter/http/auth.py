"""Optional bearer-key authentication for the public /v1 routes.

With `DECISION_API_KEY` set, /v1/systemone, /v1/models and /v1/chat/completions need
`Authorization: Bearer <key>`; unset, any Authorization header is ignored (SDKs always send one).
/invocations and /ping stay open: SageMaker authenticates callers itself (IAM, SigV4) and does
not pass their Authorization header on to the container, so no key could ever arrive there.
"""

from __future__ import annotations

import hmac

from pydantic import SecretStr
from starlette.requests import Request

from ..errors import RequestError


class AuthenticationError(RequestError):
    def __init__(self, message: str) -> None:
        super().__init__(
            401,
            message,
            field="Authorization",
            error_type="authentication_error",
            headers={"WWW-Authenticate": "Bearer"},
        )


def authenticate(request: Request, api_key: SecretStr | None) -> None:
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        raise AuthenticationError("missing API key: send it as `Authorization: Bearer <key>`")
    # Constant-time: the comparison must not tell an attacker how much of a guess was right.
    if not hmac.compare_digest(given.encode(), api_key.get_secret_value().encode()):
        raise AuthenticationError("invalid API key")
