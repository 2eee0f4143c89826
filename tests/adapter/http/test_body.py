"""Reading a body in process, through a Starlette Request fed chunk by chunk: the byte limit
(declared and chunked), the time limit, a client that leaves, the content type, and strict
JSON with the 400 naming where the problem is. The same over a live adapter:
test_hostile_input.py and test_robustness.py."""

from __future__ import annotations

import asyncio

import pytest
from decision_adapter.errors import RequestError
from decision_adapter.http.body import NOT_TEXT, parse_json, read_bytes, read_json
from starlette.requests import Request


class Client:
    """Sends `chunks`, then stalls (still sending) or disconnects; counts what was read."""

    def __init__(self, chunks: list[bytes], *, then: str = "end", headers=None) -> None:
        self.chunks, self.then, self.reads = list(chunks), then, 0
        self.headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]

    async def receive(self) -> dict:
        self.reads += 1
        if self.chunks:
            body = self.chunks.pop(0)
            return {
                "type": "http.request",
                "body": body,
                "more_body": bool(self.chunks) or (self.then != "end"),
            }
        if self.then == "stall":
            await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    def request(self) -> Request:
        scope = {"type": "http", "method": "POST", "path": "/", "headers": self.headers}
        return Request(scope, self.receive)


def read(client: Client, max_bytes: int = 64, timeout_s: float = 5.0, **kwargs) -> bytes:
    return asyncio.run(read_bytes(client.request(), max_bytes, timeout_s, **kwargs))


def read_as_json(client: Client, max_bytes: int = 64, timeout_s: float = 5.0):
    return asyncio.run(read_json(client.request(), max_bytes, timeout_s))


def refused(call, *args, **kwargs) -> RequestError:
    with pytest.raises(RequestError) as caught:
        call(*args, **kwargs)
    return caught.value


# --- size, time, disconnects -----------------------------------------------------------
def test_chunks_are_joined_in_order_up_to_exactly_the_limit():
    assert read(Client([b"a" * 30, b"b" * 34]), max_bytes=64) == b"a" * 30 + b"b" * 34
    assert read(Client([b"x" * 64], headers={"Content-Length": "64"}), max_bytes=64) == b"x" * 64


def test_a_declared_length_over_the_limit_is_a_413_before_any_byte_is_read():
    client = Client([b"x" * 100], headers={"Content-Length": "100"})
    error = refused(read, client, max_bytes=64)
    assert (error.status, error.field, error.error_type) == (413, "body", "body_too_large")
    assert error.message == "body: 100 bytes, the limit is 64 (DECISION_MAX_BODY_BYTES)"
    assert client.reads == 0


def test_a_chunked_body_over_the_limit_is_a_413_and_the_rest_is_not_read():
    client = Client([b"x" * 40, b"x" * 40, b"x" * 40, b"x" * 40])  # no Content-Length
    error = refused(read, client, max_bytes=64)
    assert (error.status, error.field, error.error_type) == (413, "body", "body_too_large")
    assert error.message == "body: more than 64 bytes (DECISION_MAX_BODY_BYTES)"
    assert client.reads == 2


def test_an_unparsable_declared_length_is_checked_by_counting():
    client = Client([b"x" * 100], headers={"Content-Length": "lots"})
    assert refused(read, client, max_bytes=64).message.startswith("body: more than 64 bytes")


def test_the_413_names_the_limit_the_caller_applies():
    error = refused(read, Client([b"x" * 65]), max_bytes=64, limit="DECISION_MAX_JSONLINES_BYTES")
    assert error.message == "body: more than 64 bytes (DECISION_MAX_JSONLINES_BYTES)"
    declared = Client([b"x" * 65], headers={"Content-Length": "65"})
    error = refused(read, declared, max_bytes=64, limit="DECISION_MAX_JSONLINES_BYTES")
    assert error.message.endswith("(DECISION_MAX_JSONLINES_BYTES)")


def test_a_body_that_stops_arriving_is_a_408_naming_the_setting():
    error = refused(read, Client([b"{"], then="stall"), timeout_s=0.05)
    assert (error.status, error.field, error.error_type) == (408, "body", "body_timeout")
    assert error.message == "body: not received within 0.05 s (DECISION_BODY_TIMEOUT_S)"


def test_a_json_body_that_stops_arriving_is_a_408_too():
    error = refused(read_as_json, Client([b'{"a": '], then="stall"), timeout_s=0.05)
    assert (error.status, error.error_type) == (408, "body_timeout")
    assert read_as_json(Client([b"[1,", b" 2]"]), max_bytes=6) == [1, 2]
    assert refused(read_as_json, Client([b"[1, 22]"]), max_bytes=6).status == 413


def test_a_client_that_leaves_mid_body_is_a_400_not_a_crash():
    error = refused(read, Client([b"{"], then="disconnect"))
    assert (error.status, error.field, error.error_type) == (400, "body", "client_disconnected")
    assert error.message == "body: the client disconnected before sending it all"


# --- content type and empty bodies -----------------------------------------------------
@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/json",
        "Application/JSON; charset=utf-8",
        " text/json ",
        "application/jsonlines",
    ],
)
def test_json_content_types_are_read(content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    assert read_as_json(Client([b'{"a": [1, "\xc3\xa9"]}'], headers=headers)) == {"a": [1, "é"]}


def test_another_content_type_is_a_415_naming_it_before_reading():
    client = Client([b"{}"], headers={"Content-Type": "Text/Plain; charset=utf-8"})
    error = refused(read_as_json, client)
    assert (error.status, error.field, error.error_type) == (
        415,
        "Content-Type",
        "unsupported_media_type",
    )
    assert error.message == "Content-Type: expected application/json, got 'text/plain'"
    assert client.reads == 0


@pytest.mark.parametrize("coding", ["gzip", "Deflate", "br, gzip"])
def test_a_compressed_body_is_a_415_naming_its_encoding_before_reading(coding):
    client = Client([b"\x1f\x8b"], headers={"Content-Encoding": coding})
    error = refused(read_as_json, client)
    assert (error.status, error.field, error.error_type) == (
        415,
        "Content-Encoding",
        "unsupported_media_type",
    )
    assert error.message == (
        f"Content-Encoding: {coding.lower()!r} is not supported; send the body uncompressed"
    )
    assert client.reads == 0


@pytest.mark.parametrize("coding", ["identity", " Identity ", ""])  # "": no coding named
def test_the_identity_encoding_is_read(coding):
    assert read_as_json(Client([b'{"a": 1}'], headers={"Content-Encoding": coding})) == {"a": 1}


@pytest.mark.parametrize("body", [b"", b" \n\t "])
def test_an_empty_body_is_a_400_asking_for_an_object(body):
    error = refused(read_as_json, Client([body]))
    assert (error.status, error.field, error.error_type) == (400, "body", "invalid_json")
    assert error.message == "body: empty; send a JSON object"


# --- strict JSON -----------------------------------------------------------------------
def test_malformed_json_names_line_and_column():
    error = refused(parse_json, b'{\n  "a": }')
    assert (error.status, error.field, error.error_type) == (400, "body", "invalid_json")
    assert error.message == "body: malformed JSON at line 2 column 8: Expecting value"


@pytest.mark.parametrize(
    "raw,message",
    [
        (b'{"a": NaN}', "body: NaN is not valid JSON"),
        (b'{"a": [-Infinity]}', "body: -Infinity is not valid JSON"),
        (b'{"a": 1, "b": {"c": 1, "c": 2}}', "body: duplicate key 'c'"),
        (b"[" * 100_000 + b"]" * 100_000, "body: maximum recursion depth exceeded"),
    ],
)
def test_what_json_loads_would_accept_silently_is_a_400(raw, message):
    error = refused(parse_json, raw)
    assert (error.status, error.field, error.error_type) == (400, "body", "invalid_json")
    assert error.message.startswith(message)


def test_a_lone_surrogate_is_refused_where_it_is():
    error = refused(parse_json, b'{"a": {"b": ["ok", "x\\ud800"]}}')
    assert (error.status, error.error_type) == (400, "invalid_json")
    assert error.field == "a.b[1]" and error.location == ("a", "b", 1)
    assert error.message == f"a.b[1]: {NOT_TEXT}"


def test_a_lone_surrogate_at_the_top_and_in_raw_bytes_is_refused():
    assert refused(parse_json, b'"\\udfff"').message == f"body: {NOT_TEXT}"
    assert refused(parse_json, '["\udc80"]'.encode("utf-8", "surrogatepass")).field == "[0]"


def test_a_key_with_a_lone_surrogate_is_shown_escaped():
    error = refused(parse_json, b'{"a": [{"k\\ud800": 1}]}')
    assert error.field == "a[0].k\\ud800" and error.location == ("a", 0, "k\\ud800")
    assert error.message == f"a[0].k\\ud800: the key {NOT_TEXT}"


def test_a_number_beyond_a_float_is_refused_where_it_is():
    error = refused(parse_json, b'{"n": [1, 1e999]}')
    assert error.field == "n[1]" and error.location == ("n", 1)
    assert error.message == (
        "n[1]: a number too large for a 64-bit float (it would be read as Infinity)"
    )


def test_real_text_and_numbers_anywhere_pass_unchanged():
    raw = '{"é": ["\U0001f600 paired \\ud83d\\ude00", 1e308, -0.5, {"k": null}], "z": true}'
    assert parse_json(raw.encode()) == {
        "é": ["\U0001f600 paired \U0001f600", 1e308, -0.5, {"k": None}],
        "z": True,
    }


ITEMS_PAST_THE_CAP = 5000


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/invocations", {"decisions": [{}] * ITEMS_PAST_THE_CAP}, "decisions"),
        (
            "/v1/systemone",
            {
                "model": "m",
                "state": "s",
                "questions": {str(n): 1 for n in range(ITEMS_PAST_THE_CAP)},
            },
            "questions",
        ),
        ("/v1/chat/completions", {"messages": [{}] * ITEMS_PAST_THE_CAP}, "messages"),
        (
            "/v1/decisions",
            {"model": "m", "input": [{}] * ITEMS_PAST_THE_CAP, "questions": []},
            "input",
        ),
    ],
)
def test_a_body_of_thousands_of_bad_items_gets_a_short_error(in_process, path, body, field):
    """Lists are capped while validated (contract.MAX_REQUEST_ITEMS) and an error body names
    the first problems and their count, not every one of them."""
    response = in_process.post(path, json=body)
    assert 400 <= response.status_code < 500, response.text[:500]
    assert len(response.content) < 20_000, len(response.content)
    assert field in response.text
    reply = response.json()
    details = reply.get("detail")
    if isinstance(details, list):
        assert len(details) <= 20


def test_a_body_past_its_count_of_json_values_is_a_413_before_any_is_validated(in_process):
    """Issue 69, finding 2's remainder: bad items spread over many lists, each under its cap,
    were all validated at once. The body's values are counted first (the object and its list
    are two of them): one past the count is a 413 naming it, at the count it reaches the
    validators, which name the list's own cap."""
    from decision_adapter.http.body import MAX_BODY_VALUES

    at_the_count = in_process.post("/invocations", json={"decisions": [0] * (MAX_BODY_VALUES - 2)})
    assert at_the_count.status_code == 422 and "at most 1024 items" in at_the_count.text
    past = in_process.post("/invocations", json={"decisions": [0] * (MAX_BODY_VALUES - 1)})
    assert past.status_code == 413, past.text[:300]
    assert past.json()["field"] == "body" and past.json()["error_type"] == "body_too_large"
    assert f"body: more than {MAX_BODY_VALUES:,} JSON values" in past.json()["error"]


def test_a_state_nested_past_the_depth_cap_is_refused_before_any_rendering(in_process):
    from decision_adapter.http.body import MAX_JSON_DEPTH

    def nested(depth):
        value = 0
        for _ in range(depth):
            value = [value]
        return value

    deep = {"decision": {"id": "d", "state": nested(900), "question": "q?",
                         "options": [{"id": "a"}, {"id": "b"}]}}  # fmt: skip
    response = in_process.post("/invocations", json=deep)
    assert response.status_code == 400, response.text[:300]
    assert f"deeper than {MAX_JSON_DEPTH} levels" in response.text
    assert response.json()["field"].startswith("decision.state")
    # The SDK's 32 levels of a state are served in every wrapping.
    fine = {"decision": {**deep["decision"], "state": nested(32)}}
    assert in_process.post("/invocations", json=fine).status_code == 200
    many = {"model": "jev-latest", "state": nested(32), "questions": {"q": {"type": "noul"}}}
    assert in_process.post("/v1/systemone", json=many).status_code == 200


STATE_ROUTES = {
    "/invocations": lambda state: {
        "decision": {"id": "d", "state": state, "question": "q?",
                     "options": [{"id": "a"}, {"id": "b"}]}},
    "/v1/systemone": lambda state: {
        "model": "jev-latest", "state": state, "questions": {"q": {"type": "noul"}}},
    "/v1/decisions": lambda state: {
        "model": "m", "questions": [{"type": "predicate", "instructions": "q?"}],
        "input": [{"role": "user", "content": [{"type": "input_json", "data": state}]}]},
}  # fmt: skip


@pytest.mark.parametrize("route", STATE_ROUTES)
def test_a_state_past_the_sdks_10000_json_values_is_refused_naming_it(in_process, route):
    """The OpenAI SDK's limit for a JSON part, in every format: what a state's values cost
    rendered is bounded before it is rendered."""
    from decision_adapter.formats.fields import MAX_STATE_VALUES

    body = STATE_ROUTES[route]
    at_limit = [{"a": 0}] * ((MAX_STATE_VALUES - 1) // 2)  # the list, then 2 values an object
    assert in_process.post(route, json=body(at_limit)).status_code == 200
    response = in_process.post(route, json=body(at_limit + [{}, {}]))
    assert response.status_code in (400, 422), response.text[:300]
    assert f"more than {MAX_STATE_VALUES:,} JSON values" in response.text
