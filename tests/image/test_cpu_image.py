"""The CPU image, built by a real Docker engine from the staged CodeBuild source
(tests/support/cpu_image.py) and run as SageMaker runs it: `docker run IMAGE serve`, the packaged
model.tar.gz unpacked into /opt/ml/model mounted read-only, the environment the endpoint stack
gives the CPU model, and no network. Requests come from a second container inside the server's
network namespace (loopback is the only interface either has), to port 8080.

Needs a Docker engine and debootstrap: `make image-test` runs it, `make test` leaves it out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time

import llama_build
import pytest

from launcher import REPO, adapter_environment
from tests.support.bodies import decision
from tests.support.cdk_templates import CPU_IMAGE, ENDPOINTS, RELEASE, STATEFUL, synthesize
from tests.support.codebuild_view import build_projects, staged_source
from tests.support.cpu_image import DOCKER, IMAGE, build_cpu_image

# The first build compiles llama-cpp-python (about 12 minutes on 2 cores).
pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]

SMALL_MODEL = "gemma3-270m"
PORT = 8080
STOP_GRACE_S = 30  # SageMaker's SIGTERM-to-SIGKILL time; `docker stop -t` gives the same
# Runs in the client container: a request to the server's port, its reply printed as JSON. With
# `in-flight` it first prints a line as soon as /stats counts the request as being worked on.
CLIENT = f"""
import json, sys, threading, time, urllib.error, urllib.request

def call(method, path, body=""):
    request = urllib.request.Request(
        "http://127.0.0.1:{PORT}" + path, data=body.encode() or None, method=method,
        headers={{"Content-Type": "application/json"}})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return {{"status": response.status, "body": response.read().decode()}}
    except urllib.error.HTTPError as error:
        return {{"status": error.code, "body": error.read().decode()}}
    except OSError as error:
        return {{"status": 0, "body": str(error)}}

mode, method, path, body = sys.argv[1:5]
if mode == "in-flight":
    replies = []
    worker = threading.Thread(target=lambda: replies.append(call(method, path, body)))
    worker.start()
    while worker.is_alive():
        stats = call("GET", "/stats")
        if stats["status"] == 200 and json.loads(stats["body"])["admission"]["in_flight"]:
            print(json.dumps({{"in_flight": True}}), flush=True)
            break
        time.sleep(0.01)
    worker.join()
    print(json.dumps(replies[0]))
else:
    print(json.dumps(call(method, path, body)))
"""


def docker(*args: str, check: bool = True, timeout: float = 180) -> str:
    done = subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert not check or done.returncode == 0, f"docker {args[0]}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def assembly(tmp_path_factory):
    """The app as cdk.json configures it, with a release (the endpoint stack) and the bundled
    small model as the model build's spec."""
    return synthesize(
        tmp_path_factory.mktemp("image-assembly"), builds={"modelSpec": SMALL_MODEL}, **RELEASE
    )


@pytest.fixture(scope="module")
def image(assembly) -> str:
    """The CPU image project's `docker build`, in the directory CDK zips as its source."""
    (project,) = [
        p
        for p in build_projects(assembly, STATEFUL)
        if p.buildspec == "container/buildspec.yml"
        and p.environment.get("DOCKERFILE") == "container/Dockerfile"
    ]
    build_cpu_image(staged_source(assembly, STATEFUL, project), project.environment["DOCKERFILE"])
    return IMAGE


@pytest.fixture(scope="module")
def stack_environment(assembly) -> dict[str, str]:
    """The CPU decision model's container environment, as the endpoint stack sets it."""
    template = json.loads((assembly / f"{ENDPOINTS}.template.json").read_text())
    (container,) = [
        resource["Properties"]["PrimaryContainer"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::SageMaker::Model"
        and resource["Properties"]["PrimaryContainer"]["Image"] == CPU_IMAGE
    ]
    environment = container["Environment"]
    assert all(isinstance(value, str) for value in environment.values()), environment
    return environment


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """model.tar.gz as `python -m model_packaging` builds it, unpacked as SageMaker does."""
    work = tmp_path_factory.mktemp("model")
    archive = work / "model.tar.gz"
    packaged = subprocess.run(
        [sys.executable, "-m", "model_packaging", "--spec", SMALL_MODEL, "--output", str(archive)],
        env=adapter_environment(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert packaged.returncode == 0, packaged.stderr
    unpacked = work / "opt-ml-model"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    return unpacked


def parsed(line: str) -> tuple[int, dict]:
    """(status, JSON body) of one reply line the client printed."""
    reply = json.loads(line)
    try:
        return reply["status"], json.loads(reply["body"])
    except json.JSONDecodeError:
        return reply["status"], {"text": reply["body"]}


class Served:
    """The server container and a client container in its network namespace."""

    def __init__(self, server: str, client: str) -> None:
        self.server, self.client = server, client

    def client_command(self, mode: str, method: str, path: str, body: dict | None) -> list[str]:
        payload = json.dumps(body) if body is not None else ""
        return [DOCKER, "exec", self.client, "python", "-c", CLIENT, mode, method, path, payload]

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        command = self.client_command("once", method, path, body)
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)
        return parsed(done.stdout)

    def log_lines(self) -> list[dict]:
        return [json.loads(line) for line in output(self.server).splitlines() if line[:1] == "{"]


def output(container: str) -> str:
    """What the container wrote, stdout and stderr (the adapter logs JSON lines to stderr)."""
    done = subprocess.run([DOCKER, "logs", container], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def served(image, model_dir, stack_environment):
    environment = [f"--env={key}={value}" for key, value in stack_environment.items()]
    server = docker(
        "run", "--detach", "--network", "none",
        "--volume", f"{model_dir}:/opt/ml/model:ro",
        *environment, image, "serve",
    ).strip()  # fmt: skip
    client = docker(
        "run", "--detach", "--rm", "--network", f"container:{server}",
        "--entrypoint", "sleep", image, "infinity",
    ).strip()  # fmt: skip
    served = Served(server, client)
    try:
        deadline = time.monotonic() + 180
        while served.request("GET", "/ping")[0] != 200:
            running = docker("inspect", "--format", "{{.State.Running}}", server).strip()
            assert running == "true", output(server)[-4000:]
            assert time.monotonic() < deadline, "no 200 from /ping within 180 s"
            time.sleep(1)
        yield served
    finally:
        docker("rm", "--force", client, server, check=False)


def test_the_container_has_no_network_and_listens_on_every_address_at_8080(served):
    interfaces = docker("exec", served.server, "cat", "/proc/net/dev")
    assert [line.split(":")[0].strip() for line in interfaces.splitlines()[2:]] == ["lo"]
    # SageMaker's proxy reaches the container from outside: the socket must not be loopback only.
    listening = [
        line.split()[1]
        for line in docker("exec", served.server, "cat", "/proc/net/tcp").splitlines()[1:]
        if line.split()[3] == "0A"  # TCP_LISTEN
    ]
    assert f"00000000:{PORT:04X}" in listening


def test_start_up_line_names_the_llama_libraries_the_image_compiled(served):
    (loaded,) = [line for line in served.log_lines() if line.get("event") == "model_loaded"]
    package = loaded["llama_cpp_package"]
    assert package.startswith("/opt/venv/lib/")
    libraries = loaded["llama_libraries"]
    assert any("libllama" in path for path in libraries)
    assert all(path.startswith(f"{package}/lib/") for path in libraries), libraries
    assert loaded["ld_library_path"] == ""
    assert loaded["layers"] == {"offloaded": 0, "total": loaded["layers"]["total"]}


def test_the_image_runs_the_best_cpu_variant_without_amx(served):
    """The runtime dispatch chose a CPU backend this host supports (AVX2's at least where it
    has AVX2), never an excluded one, and the start-up line says which."""
    (loaded,) = [line for line in served.log_lines() if line.get("event") == "model_loaded"]
    backend = loaded["cpu_backend"]
    variant = backend["variant"]
    print(f"CPU backend variant loaded by the container: {variant}; features {backend['features']}")
    assert variant not in ("built in", *llama_build.EXCLUDED_VARIANTS)
    assert any(path.endswith(f"/libggml-cpu-{variant}.so") for path in loaded["llama_libraries"])
    assert not set(llama_build.EXCLUDED) & set(backend["features"])
    assert all("AMX" not in name for name in backend["extra_buffer_types"])
    host = llama_build.local_features(llama_build.cpu_flags())
    assert set(host) & {"AVX2", "AVX512"} <= set(backend["features"]), (host, backend)


def test_a_decision_through_invocations_reads_the_mounted_model(served, model_dir):
    manifest = json.loads((model_dir / "model-manifest.json").read_text())
    status, reply = served.request(
        "POST", "/invocations", decision("Printer is on fire.", "Urgent?", ("yes", "no"))
    )
    assert status == 200, reply
    result = reply["result"]
    assert result["model"]["gguf_source"] == "model directory /opt/ml/model"
    assert result["model"]["gguf_sha256"] == manifest["files"][0]["sha256"]
    assert result["option_ids"] == ["yes", "no"]
    assert sum(result["probabilities"]) == pytest.approx(1.0)


def test_a_system_one_request_through_invocations(served):
    body = {
        "model": "jev-latest",
        "state": "I was charged twice for my March invoice. Refund me today.",
        "questions": {"refund": {"type": "noul", "instructions": "Is a refund asked for?"}},
    }
    status, reply = served.request("POST", "/invocations", body)
    assert status == 200, reply
    refund = reply["answers"]["refund"]
    assert refund["type"] == "noul" and 0 <= refund["noul"] <= 1


def test_a_chat_through_invocations(served):
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    status, reply = served.request("POST", "/invocations", body)
    assert status == 200, reply
    (choice,) = reply["choices"]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert reply["usage"]["completion_tokens"] <= 8


def test_docker_stop_drains_the_request_in_flight_within_the_grace_period(served):
    chat = {
        "messages": [{"role": "user", "content": "Count from 1 to 2000: 1, 2, 3,"}],
        "max_tokens": 64,
        "temperature": 0,
    }
    command = served.client_command("in-flight", "POST", "/invocations", chat)
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as client:
        first = json.loads(client.stdout.readline())
        assert first == {"in_flight": True}, f"the chat ended before it was seen running: {first}"
        stopped_at = time.monotonic()
        docker("stop", "--time", str(STOP_GRACE_S), served.server, timeout=STOP_GRACE_S + 30)
        took = time.monotonic() - stopped_at
        status, answer = parsed(client.stdout.readline())
    state = json.loads(docker("inspect", "--format", "{{json .State}}", served.server))
    assert state["ExitCode"] == 0 and not state["OOMKilled"], state  # not SIGKILL's 137
    assert took < STOP_GRACE_S
    assert status == 200, answer
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == chat["max_tokens"]
