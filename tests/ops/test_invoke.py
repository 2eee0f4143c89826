"""ops invoke: SageMaker through botocore's Stubber, a local URL through a tiny HTTP server."""

import io
import json
import random

import pytest
from botocore.response import StreamingBody
from decision_adapter.http.openapi import DECISION_EXAMPLE

from ops.cli import main
from ops.retry import Backoff
from tests.support.fake_service import overload_bodies
from tests.support.http_stub import http_stub, json_answer

# The endpoint is a stub: it answers DECISION_ANSWER whatever the body (here the OpenAPI
# document's example) asks.
DECISION_ANSWER = {
    "result": {
        "id": "route",
        "option_ids": ["billing", "tech"],
        "probabilities": [0.8125, 0.1875],
        "option_logits": [1.5, 0.0335],
        "input_tokens": 71,
        "allowed_token_mass": 0.97,
        "prompt_version": "v1",
    }
}


def streaming(payload: dict) -> StreamingBody:
    data = json.dumps(payload).encode()
    return StreamingBody(io.BytesIO(data), len(data))


def invoke_params(endpoint="decisions"):
    return {
        "EndpointName": endpoint,
        "Body": json.dumps(DECISION_EXAMPLE).encode(),  # body_file's bytes, as written
        "ContentType": "application/json",
        "Accept": "application/json",
    }


def busy(stubber, status=503, **meta):
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message="busy",
        http_status_code=424,
        modeled_fields={
            "OriginalStatusCode": status,
            "OriginalMessage": '{"error": "busy", "retryable": true}',
        },
        response_meta=meta or None,
    )


def run(argv, client, sleeps):
    # Keyed by service name: a command asking for the wrong client fails the test.
    return main(
        argv,
        clients={"sagemaker-runtime": client}.__getitem__,
        sleep=sleeps.append,
        rng=random.Random(3),
    )


def test_endpoint_503_is_retried_then_the_decision_table_is_printed(runtime, body_file, capsys):
    client, stubber = runtime
    busy(stubber)
    busy(stubber, HTTPHeaders={"retry-after": "4"})
    stubber.add_response(
        "invoke_endpoint",
        {"Body": streaming(DECISION_ANSWER), "ContentType": "application/json"},
        expected_params=invoke_params(),
    )
    sleeps = []

    code = run(["invoke", "--endpoint", "decisions", str(body_file)], client, sleeps)

    out, err = capsys.readouterr()
    assert code == 0
    assert len(sleeps) == 2 and sleeps[1] >= 4.0  # Retry-After honoured on the second refusal
    assert err.count("retrying in") == 2
    assert "decision route: billing (p=0.812)" in out
    billing_row = next(line for line in out.splitlines() if line.strip().startswith("billing"))
    assert "0.8125" in billing_row and "1.500" in billing_row and "#" in billing_row
    assert "allowed token mass 0.97" in out


def test_throttling_is_retried(runtime, body_file, capsys):
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint", service_error_code="ThrottlingException", http_status_code=400
    )
    stubber.add_response("invoke_endpoint", {"Body": streaming(DECISION_ANSWER)})
    sleeps = []
    assert run(["invoke", "--endpoint", "decisions", str(body_file)], client, sleeps) == 0
    assert len(sleeps) == 1


def test_container_4xx_is_reported_without_retry(runtime, body_file, capsys):
    client, stubber = runtime
    busy(stubber, status=422)
    sleeps = []
    code = run(["invoke", "--endpoint", "decisions", str(body_file)], client, sleeps)
    assert code == 1 and sleeps == []
    assert "container answered 422" in capsys.readouterr().err


def test_persistent_503_gives_up_after_max_attempts(runtime, body_file, capsys):
    client, stubber = runtime
    for _ in range(3):
        busy(stubber)
    sleeps = []
    code = run(
        ["invoke", "--endpoint", "decisions", "--max-attempts", "3", str(body_file)], client, sleeps
    )
    assert code == 1 and len(sleeps) == 2
    assert "gave up after 3 attempts" in capsys.readouterr().err


def adapter_busy(stubber, retry_after_s: int) -> None:
    """A ModelError as InvokeEndpoint raises it for the adapter's overload 503: the body as
    OriginalMessage, no Retry-After header."""
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message="Received server error (503) from primary",
        http_status_code=424,
        modeled_fields={
            "OriginalStatusCode": 503,
            "OriginalMessage": overload_bodies(retry_after_s)["decision"],
        },
        expected_params=invoke_params(),
    )


def test_retry_after_in_a_model_errors_body_is_waited_then_retried(runtime, body_file, capsys):
    client, stubber = runtime
    adapter_busy(stubber, retry_after_s=2)
    stubber.add_response(
        "invoke_endpoint",
        {"Body": streaming(DECISION_ANSWER), "ContentType": "application/json"},
        expected_params=invoke_params(),
    )
    sleeps = []
    code = run(["invoke", "--endpoint", "decisions", str(body_file)], client, sleeps)
    assert code == 0 and sleeps == [2.0]  # the jitter of a first retry is at most 0.5 s
    assert "retrying in 2.00s" in capsys.readouterr().err
    stubber.assert_no_pending_responses()


def test_retry_after_in_the_body_gives_up_after_the_attempts_budget(runtime, body_file, capsys):
    client, stubber = runtime
    for _ in range(3):
        adapter_busy(stubber, retry_after_s=2)
    sleeps = []
    code = run(
        ["invoke", "--endpoint", "decisions", "--max-attempts", "3", str(body_file)], client, sleeps
    )
    assert code == 1 and sleeps == [2.0, 2.0]
    assert "gave up after 3 attempts" in capsys.readouterr().err
    stubber.assert_no_pending_responses()


def test_json_flag_prints_the_answer_as_json_from_stdin(runtime, monkeypatch, capsys):
    client, stubber = runtime
    stubber.add_response(
        "invoke_endpoint",
        {"Body": streaming(DECISION_ANSWER)},
        expected_params={**invoke_params("other"), "CustomAttributes": "trace=1"},
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(DECISION_EXAMPLE)))
    code = run(
        ["invoke", "--endpoint", "other", "--custom-attributes", "trace=1", "--json"], client, []
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out) == DECISION_ANSWER


def test_endpoint_name_can_come_from_the_environment(runtime, body_file, monkeypatch, capsys):
    client, stubber = runtime
    stubber.add_response(
        "invoke_endpoint",
        {"Body": streaming(DECISION_ANSWER)},
        expected_params=invoke_params("from-env"),
    )
    monkeypatch.setenv("OPS_ENDPOINT_NAME", "from-env")
    assert run(["invoke", str(body_file)], client, []) == 0


def test_the_body_is_sent_as_written_for_the_server_to_judge(tmp_path):
    # json.loads would keep the second "state" silently; the adapter refuses the duplicate key.
    written = '{"decision": {"id": "d", "state": "a", "state": "b"}}\n'
    body = tmp_path / "body.json"
    body.write_bytes(b"\xef\xbb\xbf" + written.encode())  # as Windows editors save it
    with http_stub(json_answer(400, {"error": "body: duplicate key 'state'"})) as server:
        assert main(["invoke", "--url", server.url, str(body)]) == 1
    assert server.received[0].body == written.encode()


@pytest.mark.parametrize("content", [b"{not json", b'{"state": "caf\xe9"}'])
def test_body_that_is_not_json_is_a_usage_error(tmp_path, capsys, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)  # malformed, or not UTF-8
    assert main(["invoke", "--url", "http://127.0.0.1:9", str(bad)]) == 2
    assert "cannot read a JSON body" in capsys.readouterr().err


@pytest.mark.parametrize(
    "url",
    ["127.0.0.1:8080", "notaurl", "ftp://127.0.0.1/", "http://", "http://h:port", "http://h:0"],
)
def test_a_url_that_is_not_http_with_a_host_is_a_usage_error(body_file, capsys, url):
    assert main(["invoke", "--url", url, str(body_file)]) == 2
    assert capsys.readouterr().err == (
        f"ops: error: --url expects an http(s) URL such as http://127.0.0.1:8080, got {url!r}\n"
    )


BUSY = {"error": "all slots busy", "retryable": True}


def test_local_url_503_twice_then_200(tmp_path, capsys):
    systemone = {
        "model": "jev-latest",
        "answers": {
            "urgent": {"type": "noul", "noul": 0.25},
            "team": {
                "type": "choice",
                "choice": "billing",
                "confidence": 0.5,
                "probabilities": {"billing": 0.75, "tech": 0.25},
            },
        },
        "usage": {"input_tokens": 80, "output_tokens": 0},
    }
    request = {"model": "jev-latest", "state": "s", "questions": {"urgent": {"type": "noul"}}}
    body = tmp_path / "systemone.json"
    body.write_text(json.dumps(request))
    sleeps = []

    # 503 twice (the second time with Retry-After), then the answer.
    answers = json_answer(503, BUSY), json_answer(503, BUSY, **{"Retry-After": "2"})
    with http_stub(*answers, json_answer(200, systemone)) as server:
        code = main(
            ["invoke", "--url", server.url, str(body)], sleep=sleeps.append, rng=random.Random(0)
        )

    out = capsys.readouterr().out
    assert code == 0
    assert [r.path for r in server.received] == ["/invocations"] * 3
    assert all(
        r.headers["Content-Type"] == "application/json" and json.loads(r.body) == request
        for r in server.received
    )
    assert len(sleeps) == 2 and sleeps[1] >= 2.0
    assert "urgent (noul): P(true)=0.2500" in out
    assert "team (choice): billing, confidence 0.500" in out
    assert "input tokens 80" in out


def test_local_url_client_error_is_not_retried(tmp_path, capsys):
    body = tmp_path / "b.json"
    body.write_text("{}")
    sleeps = []
    with http_stub(json_answer(422, {"detail": [{"msg": "field required"}]})) as server:
        argv = ["invoke", "--url", server.url, "--path", "/v1/systemone", str(body)]
        code = main(argv, sleep=sleeps.append)
    assert code == 1 and sleeps == []
    assert server.received[0].path == "/v1/systemone"
    assert "HTTP 422" in capsys.readouterr().err


def test_chat_answer_prints_the_message_content(runtime, body_file, capsys):
    client, stubber = runtime
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Billing."}}]}
    stubber.add_response("invoke_endpoint", {"Body": streaming(chat)})
    assert run(["invoke", "--endpoint", "decisions", str(body_file)], client, []) == 0
    assert capsys.readouterr().out.strip() == "Billing."


def test_local_url_passes_custom_attributes_and_prints_a_non_json_answer_as_text(tmp_path, capsys):
    body = tmp_path / "b.json"
    body.write_text("{}")
    with http_stub((200, {}, b"caf\xe9 ok")) as server:  # not JSON, not even UTF-8
        argv = ["invoke", "--url", server.url, "--custom-attributes", "format=chat", str(body)]
        assert main(argv) == 0
    assert capsys.readouterr().out == "caf\ufffd ok\n"
    attributes = [r.headers["X-Amzn-SageMaker-Custom-Attributes"] for r in server.received]
    assert attributes == ["format=chat"]


def test_retry_delays_come_from_the_given_random_source(runtime, body_file, capsys):
    client, stubber = runtime
    busy(stubber)
    busy(stubber)
    stubber.add_response("invoke_endpoint", {"Body": streaming(DECISION_ANSWER)})
    sleeps = []
    assert run(["invoke", "--endpoint", "decisions", str(body_file)], client, sleeps) == 0
    rng, backoff = random.Random(3), Backoff()
    assert sleeps == [backoff.delay(0, None, rng), backoff.delay(1, None, rng)]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"attempt 1: container answered 503; retrying in {sleeps[0]:.2f}s",
        f"attempt 2: container answered 503; retrying in {sleeps[1]:.2f}s",
    ]


def test_final_error_shows_the_containers_answer(runtime, body_file, capsys):
    client, stubber = runtime
    busy(stubber, status=422)
    assert run(["invoke", "--endpoint", "decisions", str(body_file)], client, []) == 1
    assert capsys.readouterr().err == (
        'ops: error: container answered 422: {"error": "busy", "retryable": true}\n'
    )


def test_final_error_without_a_body_is_one_plain_line(tmp_path, capsys):
    body = tmp_path / "b.json"
    body.write_text("{}")
    with http_stub((404, {}, b"")) as server:
        assert main(["invoke", "--url", server.url, str(body)]) == 1
    assert capsys.readouterr().err == "ops: error: HTTP 404\n"


@pytest.mark.parametrize("attempts,code", [("0", 2), ("1", 1)])
def test_max_attempts_must_be_positive_and_one_means_no_retry(
    runtime, body_file, capsys, attempts, code
):
    client, stubber = runtime
    if code == 1:
        busy(stubber)
    sleeps = []
    argv = ["invoke", "--endpoint", "decisions", "--max-attempts", attempts, str(body_file)]
    assert run(argv, client, sleeps) == code
    err = capsys.readouterr().err
    if code == 2:
        assert err == "ops: error: --max-attempts must be at least 1\n"
    else:
        assert sleeps == [] and "gave up after 1 attempts" in err


def test_invoke_without_a_target_is_a_usage_error(body_file, monkeypatch, capsys):
    monkeypatch.delenv("OPS_ENDPOINT_NAME", raising=False)
    assert main(["invoke", str(body_file)], clients=lambda s: pytest.fail("no AWS call")) == 2
    assert capsys.readouterr().err == (
        "ops: error: pass --endpoint NAME, --url URL, or set OPS_ENDPOINT_NAME\n"
    )


def test_json_flag_prints_indented_json_keeping_non_ascii(runtime, body_file, capsys):
    client, stubber = runtime
    answer = {"result": {"id": "r\u00e9sum\u00e9", "option_ids": ["a"], "probabilities": [1.0]}}
    stubber.add_response("invoke_endpoint", {"Body": streaming(answer)})
    assert run(["invoke", "--endpoint", "decisions", "--json", str(body_file)], client, []) == 0
    assert capsys.readouterr().out == (
        '{\n  "result": {\n    "id": "r\u00e9sum\u00e9",\n    "option_ids": [\n      "a"\n    ],\n'
        '    "probabilities": [\n      1.0\n    ]\n  }\n}\n'
    )
