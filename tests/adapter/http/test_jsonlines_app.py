"""JSON Lines bodies on /invocations and /execution-parameters, in process over the fake service:
splitting, per-line errors in each line's format, limits, admission once per body. The real
model answers JSON Lines in tests/adapter/http/test_jsonlines.py."""

from __future__ import annotations

import asyncio
import contextvars
import json

import pytest
from decision_adapter.errors import Busy, OutOfTime, ShuttingDown, TooManyQuestions
from decision_adapter.http.jsonlines import encode
from decision_adapter.service.admission import ModelRunner

from tests.support.fake_service import FakeService, app_client

ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
JSONL = {"Content-Type": "application/jsonlines"}


def decision(id="d", state="s"):
    return {
        "decision": {
            "id": id,
            "state": state,
            "question": "q?",
            "options": [{"id": "a"}, {"id": "b"}],
        }
    }


SYSTEM_ONE = {"model": "jev-latest", "state": "s", "questions": {"ok": {"type": "noul"}}}


def jsonl(*items) -> bytes:
    """Objects as JSON lines; bytes are sent as they are."""
    return b"".join(i if isinstance(i, bytes) else json.dumps(i).encode() + b"\n" for i in items)


def answers(response) -> list[dict]:
    assert response.headers["content-type"] == "application/jsonlines"
    assert response.content.endswith(b"\n")
    return [json.loads(line) for line in response.content.split(b"\n")[:-1]]


@pytest.fixture
def service():
    return FakeService()


@pytest.fixture
def client(service):
    with app_client(lambda _: service, max_jsonlines_lines=8) as client:
        yield client


def test_every_line_is_answered_in_order_bad_ones_as_their_formats_error_objects(client, service):
    body = jsonl(
        decision("first"),
        b"{not json\n",
        decision("second"),
        {"messages": [{"role": "user", "content": "hi"}]},  # chat: not a line format
        SYSTEM_ONE,
        {**SYSTEM_ONE, "questions": {"ok": {"type": "maybe"}}},
        {"decision": {"id": "x", "state": "s", "question": "q?", "options": [{"id": "a"}]}},
    )
    response = client.post("/invocations", content=body, headers=JSONL)
    assert response.status_code == 200
    got = answers(response)
    assert len(got) == 7
    assert got[0]["result"]["id"] == "first" and got[2]["result"]["id"] == "second"
    assert got[4]["answers"]["ok"]["type"] == "noul"
    assert got[1] == {
        **got[1],
        "line": 2,
        "status": 400,
        "error_type": "invalid_json",
        "retryable": False,
    }
    # The line, and the column within it: not "line 1" of a body of one line.
    assert got[1]["error"].startswith("line 2: malformed JSON at column 2")
    # Chat as a line is refused as forcing chat on the body is: a 415, not a shape 422.
    assert (got[3]["line"], got[3]["status"], got[3]["field"]) == (4, 415, "body")
    assert got[3]["error_type"] == "unsupported_media_type"
    assert got[3]["error"] == (
        "line 4: a chat body cannot be a JSON Lines line; lines hold decision or decisions-openai"
        " or systemone bodies"
    )
    # System One's own 422 shape, the decision format's own, each with its line.
    assert got[5]["status"] == 422 and got[5]["line"] == 6
    assert got[5]["detail"][0]["loc"][:3] == ["body", "questions", "ok"]
    assert got[6]["status"] == 422 and got[6]["field"] == "decision.options"
    # Bad lines never reached the service; good ones came one body each, in one admission.
    assert [len(batch) for batch in service.scored] == [1, 1, 1]
    assert service.scored[1][0].question.question == "q?" and service.scored[2][0].state == "s"
    assert service.reservations == 1


def test_a_line_answers_exactly_what_the_same_body_alone_answers(client):
    alone = client.post("/invocations", json=decision("same")).json()
    (line,) = answers(client.post("/invocations", content=jsonl(decision("same")), headers=JSONL))
    assert line == alone


def test_a_line_of_no_format_gets_the_error_the_same_body_alone_gets(client):
    alone = client.post("/invocations", json={"x": 1})
    (line,) = answers(client.post("/invocations", content=jsonl({"x": 1}), headers=JSONL))
    assert line["status"] == alone.status_code == 422
    assert line["error"] == alone.json()["error"]  # the formats listed in the same order


@pytest.mark.parametrize(
    "content_type", ["application/x-jsonlines", "application/jsonl", "Application/JSONLines; x=1"]
)
def test_the_common_json_lines_media_types_are_accepted(client, content_type):
    body = jsonl(decision("a"), decision("b"))
    response = client.post("/invocations", content=body, headers={"Content-Type": content_type})
    assert [a["result"]["id"] for a in answers(response)] == ["a", "b"]


def test_crlf_and_a_missing_final_newline_are_one_line_each(client):
    body = json.dumps(decision("a")).encode() + b"\r\n" + json.dumps(decision("b")).encode()
    got = answers(client.post("/invocations", content=body, headers=JSONL))
    assert [a["result"]["id"] for a in got] == ["a", "b"]


def test_blank_lines_answer_an_error_so_output_line_n_answers_input_line_n(client):
    body = jsonl(decision("a"), b"\n", b"  \t\r\n", decision("b"))
    got = answers(client.post("/invocations", content=body, headers=JSONL))
    assert got[0]["result"]["id"] == "a" and got[3]["result"]["id"] == "b"
    for number in (2, 3):
        assert got[number - 1]["status"] == 400 and got[number - 1]["line"] == number
        assert got[number - 1]["error"] == f"line {number}: blank; send one JSON object per line"


def test_a_byte_order_mark_before_the_first_line_is_not_part_of_it(client):
    body = b"\xef\xbb\xbf" + jsonl(decision("a"), b"\xef\xbb\xbf" + jsonl(decision("b")))
    got = answers(client.post("/invocations", content=body, headers=JSONL))
    assert got[0]["result"]["id"] == "a"
    # Inside the file it is content: that line is refused, not silently cleaned.
    assert got[1]["status"] == 400 and got[1]["line"] == 2 and "BOM" in got[1]["error"]


def test_invalid_utf8_is_a_400_naming_the_line_and_the_byte(client):
    body = jsonl(decision("a"), b'{"decision": "\xff"}\n', decision("b"))
    got = answers(client.post("/invocations", content=body, headers=JSONL))
    assert got[1]["status"] == 400 and got[1]["line"] == 2
    assert got[1]["error"] == "line 2: not UTF-8 at byte 15 (invalid start byte)"
    assert [got[0]["result"]["id"], got[2]["result"]["id"]] == ["a", "b"]


def test_an_empty_body_is_a_400_and_a_lone_newline_one_blank_line(client):
    response = client.post("/invocations", content=b"", headers=JSONL)
    assert response.status_code == 400
    assert response.json()["error"] == "body: empty; send one JSON object per line"
    (blank,) = answers(client.post("/invocations", content=b"\n", headers=JSONL))
    assert blank["status"] == 400 and blank["line"] == 1


def test_too_many_lines_is_a_413_naming_the_limit_before_any_parse_or_model_work(client, service):
    body = jsonl(*[decision(str(i)) for i in range(9)])
    response = client.post("/invocations", content=body, headers=JSONL)
    assert response.status_code == 413
    assert response.json()["error"] == (
        "body: 9 lines, the limit is 8 (DECISION_MAX_JSONLINES_LINES)"
    )
    assert service.scored == [] and service.reservations == 0
    # Eight lines, the last without its newline, are within it.
    eight = body.rstrip(b"\n").rsplit(b"\n", 1)[0]
    response = client.post("/invocations", content=eight, headers=JSONL)
    assert len(answers(response)) == 8


def test_bytes_over_the_json_lines_limit_are_a_413_naming_it(service):
    with app_client(lambda _: service) as client:
        body = jsonl(decision("x" * (1 << 20)))
        response = client.post("/invocations", content=body, headers=JSONL)
        assert response.status_code == 413
        assert response.json()["error"] == (
            f"body: {len(body)} bytes, the limit is 1048576 (DECISION_MAX_JSONLINES_BYTES)"
        )
    assert service.scored == []


def test_a_line_over_the_single_body_limit_answers_its_own_413(service):
    with app_client(lambda _: service, max_body_bytes=2048) as client:
        body = jsonl(decision("a"), decision("b", state="x" * 2048))
        got = answers(client.post("/invocations", content=body, headers=JSONL))
    assert got[0]["result"]["id"] == "a"
    assert got[1]["status"] == 413 and got[1]["error_type"] == "body_too_large"
    assert got[1]["error"].startswith("line 2: ") and "(DECISION_MAX_BODY_BYTES)" in got[1]["error"]


def test_a_line_past_the_bodys_count_of_json_values_answers_its_own_413(client):
    from decision_adapter.http.body import MAX_BODY_VALUES

    many = {"decisions": [0] * MAX_BODY_VALUES}
    got = answers(client.post("/invocations", content=jsonl(decision("a"), many), headers=JSONL))
    assert got[0]["result"]["id"] == "a"
    assert got[1]["status"] == 413 and got[1]["error_type"] == "body_too_large"
    assert got[1]["error"].startswith(f"line 2: more than {MAX_BODY_VALUES:,} JSON values")


class FailsOnState(FakeService):
    """Refuses questions about one state as the real service refuses a request over a limit."""

    def __init__(self, state: str, error: Exception) -> None:
        super().__init__()
        self.state, self.error = state, error

    async def score(self, questions):
        if any(item.state == self.state for item in questions):
            raise self.error
        return await super().score(questions)


def test_a_limit_met_by_one_line_fails_that_line_only():
    service = FailsOnState("big", TooManyQuestions(40, 32))
    with app_client(lambda _: service) as client:
        body = jsonl(decision("a"), decision("b", state="big"), decision("c"))
        got = answers(client.post("/invocations", content=body, headers=JSONL))
    assert [got[0]["result"]["id"], got[2]["result"]["id"]] == ["a", "c"]
    assert got[1]["status"] == 422 and got[1]["field"] == "decision" and got[1]["line"] == 2


def test_a_line_past_its_scoring_deadline_fails_that_line_only():
    """The others are answered: a batch job retrying the body would meet the same line."""
    service = FailsOnState("long", OutOfTime(retry_after_s=2, deadline_s=45))
    with app_client(lambda _: service) as client:
        body = jsonl(decision("a"), decision("b", state="long"), decision("c"))
        response = client.post("/invocations", content=body, headers=JSONL)
    assert response.status_code == 200
    got = answers(response)
    assert [got[0]["result"]["id"], got[2]["result"]["id"]] == ["a", "c"]
    assert got[1]["status"] == 503 and got[1]["line"] == 2
    assert "DECISION_SCORING_DEADLINE_S" in json.dumps(got[1])


def test_shutting_down_midway_fails_the_whole_body_with_a_retryable_503():
    service = FailsOnState("late", ShuttingDown(retry_after_s=4))
    with app_client(lambda _: service) as client:
        body = jsonl(decision("a"), decision("b", state="late"))
        response = client.post("/invocations", content=body, headers=JSONL)
    assert response.status_code == 503 and response.headers["retry-after"] == "4"
    assert response.json()["retryable"] is True


def test_a_body_of_only_bad_lines_never_reserves_the_model(client, service):
    got = answers(client.post("/invocations", content=b"[]\n{}\n", headers=JSONL))
    assert [a["status"] for a in got] == [422, 422]
    assert service.reservations == 0


def test_a_forced_format_answers_every_line_and_its_errors_in_that_format(client):
    headers = {**JSONL, ATTRIBUTES: "format=systemone"}
    got = answers(client.post("/invocations", content=jsonl(SYSTEM_ONE, b"{\n"), headers=headers))
    assert got[0]["answers"]["ok"]["type"] == "noul"
    # System One answers malformed JSON as FastAPI does: a 422 in its validation shape.
    alone = client.post("/invocations", content=b"{", headers={ATTRIBUTES: "format=systemone"})
    (error,) = alone.json()["detail"]
    line_error = {**error, "msg": error["msg"].replace("body:", "line 2:").replace("line 1 ", "")}
    assert got[1] == {"detail": [line_error], "line": 2, "status": alone.status_code}
    assert got[1]["detail"][0]["type"] == "invalid_json"


def test_chat_cannot_be_forced_on_json_lines(client):
    headers = {**JSONL, ATTRIBUTES: "format=chat"}
    response = client.post("/invocations", content=jsonl(decision()), headers=headers)
    assert response.status_code == 415
    assert "format=chat cannot be sent as JSON Lines" in response.text


def test_other_routes_keep_reading_one_json_document(client):
    response = client.post("/v1/systemone", content=jsonl(SYSTEM_ONE), headers=JSONL)
    assert response.status_code == 200 and "answers" in response.json()
    response = client.post("/v1/systemone", content=jsonl(SYSTEM_ONE, SYSTEM_ONE), headers=JSONL)
    assert response.status_code == 422 and "malformed JSON at line 2" in response.text


def test_answers_escape_the_line_separators_other_splitters_break_on():
    encoded = encode([{"text": "a\u2028b\u2029c\nd"}, {"n": 1}])
    assert encoded.count(b"\n") == 2 and b"\xe2\x80\xa8" not in encoded
    assert [json.loads(line) for line in encoded.decode().splitlines()] == [
        {"text": "a\u2028b\u2029c\nd"},
        {"n": 1},
    ]


# --- /execution-parameters -------------------------------------------------------------
@pytest.mark.parametrize(("limit", "megabytes"), [(1 << 20, 1), ((3 << 20) + 5, 3)])
def test_execution_parameters_follow_the_settings(limit, megabytes):
    with app_client(max_jsonlines_bytes=limit) as client:
        response = client.get("/execution-parameters")
    assert response.status_code == 200
    assert response.json() == {
        "MaxConcurrentTransforms": 1,
        "BatchStrategy": "MULTI_RECORD",
        "MaxPayloadInMB": megabytes,
    }


# --- one admission for a body ----------------------------------------------------------
def test_a_reservation_runs_its_jobs_without_admission_and_refuses_others():
    async def scenario():
        runner = ModelRunner(max_queue=0, wait_s=0, retry_after_s=1)
        try:
            async with runner.reserved():
                first, _ = await runner.run(lambda: 1)
                second, _ = await runner.run(lambda: 2)
                # Another request: its own task and context, as the server gives each request.
                refused = asyncio.create_task(runner.run(lambda: 3), context=contextvars.Context())
                with pytest.raises(Busy):
                    await refused
                assert runner.in_flight == 1
            after, _ = await runner.run(lambda: 4)
            return [first, second, after], runner.counters()
        finally:
            runner.close()

    results, counters = asyncio.run(scenario())
    assert results == [1, 2, 4]
    assert counters["admitted"] == 2 and counters["refused_queue_full"] == 1
    assert counters["in_flight"] == 0


def test_a_cancelled_reservation_frees_the_slot_only_when_its_job_ends():
    async def scenario():
        runner = ModelRunner(max_queue=0, wait_s=0, retry_after_s=1)
        job_started, job_may_end = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()

        def slow_job():
            loop.call_soon_threadsafe(job_started.set)
            asyncio.run_coroutine_threadsafe(job_may_end.wait(), loop).result()

        async def body():
            async with runner.reserved():
                await runner.run(slow_job)

        try:
            task = asyncio.create_task(body())
            await job_started.wait()  # the job runs on the model thread
            task.cancel()  # the client left mid-job
            with pytest.raises(asyncio.CancelledError):
                await task
            held_after_cancel = runner.in_flight
            job_may_end.set()
            while runner.in_flight:
                await asyncio.sleep(0.01)
            return held_after_cancel
        finally:
            runner.close()

    assert asyncio.run(scenario()) == 1
