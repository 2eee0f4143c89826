"""ops context: release values and switches written into cdk.json, the one committed place every
later `make deploy` and `make destroy` reads; what it writes is what the app then reads."""

from __future__ import annotations

import json
import shutil

import pytest

from ops.cli import main
from stacks import capacity
from stacks.config import AppConfig
from tests.support.cdk_templates import CPU_IMAGE, GPU_IMAGE, MODEL, ROOT


@pytest.fixture
def cdk_json(tmp_path, monkeypatch):
    """A copy of the repository's cdk.json where `ops context` writes."""
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    monkeypatch.setattr(capacity, "ROOT", tmp_path)
    return tmp_path / "cdk.json"


def context(path) -> dict:
    return json.loads(path.read_text())["context"]


def test_a_release_and_its_switches_are_written_for_every_later_deploy(cdk_json, capsys):
    argv = [
        "context",
        "set",
        f"modelDataUri={MODEL}",
        f"decisionCpuImage={CPU_IMAGE}",
        "decisionCpuEndpoint.measuring=true",
        "textGenerationEndpoint.measuring=true",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == [
        f'cdk.json: modelDataUri = "{MODEL}"',
        f'cdk.json: decisionCpuImage = "{CPU_IMAGE}"',
        "cdk.json: decisionCpuEndpoint.measuring = true",
        "cdk.json: textGenerationEndpoint.measuring = true",
    ]
    config = AppConfig.from_context(context(cdk_json))
    assert (config.model_data_uri, config.decision_cpu_image) == (MODEL, CPU_IMAGE)
    cpu = config.decision_cpu_endpoint
    assert cpu.measuring and cpu.autoscaling.max_capacity == 1 and cpu.max_queue == 8
    # The GPU step adds its switch and image; the CPU endpoint's section keeps what it had.
    gpu = ["decisionGpuEndpoint.enabled=true", "decisionGpuEndpoint.measuring=true"]
    gpu += [f"decisionGpuImage={GPU_IMAGE}", 'decisionGpuEndpoint.instancePool=["ml.g6e.xlarge"]']
    assert main(["context", "set", *gpu]) == 0
    config = AppConfig.from_context(context(cdk_json))
    assert config.decision_gpu_endpoint.enabled
    assert config.decision_gpu_endpoint.instance_pool == ["ml.g6e.xlarge"]
    assert config.decision_cpu_endpoint.measuring


def test_unset_drops_the_key_and_the_objects_it_leaves_empty(cdk_json, capsys):
    original = cdk_json.read_text()
    assert main(["context", "set", "decisionCpuEndpoint.measuring=true"]) == 0
    assert main(["context", "unset", "decisionCpuEndpoint.measuring", "modelDataUri"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "cdk.json: decisionCpuEndpoint.measuring unset",
        "cdk.json: modelDataUri was not set",
    ]
    assert cdk_json.read_text() == original  # the file as it was, byte for byte


@pytest.mark.parametrize(
    "assignment, named",
    [
        ("decisionCpuEndpoint.maxQueue=-3", "decisionCpuEndpoint.maxQueue"),
        ("decisionCpuImage=registry/repo:latest", "decisionCpuImage"),
        ("decisionCpuEndpoint.measuring=maybe", "decisionCpuEndpoint.measuring"),
        ("noSuchKey.enabled=true", "noSuchKey"),
    ],
)
def test_a_value_the_app_would_refuse_is_not_written_and_the_field_is_named(
    cdk_json, capsys, assignment, named
):
    original = cdk_json.read_text()
    assert main(["context", "set", assignment]) == 2
    assert named in capsys.readouterr().err
    assert cdk_json.read_text() == original


def test_an_assignment_without_a_value_is_refused(cdk_json, capsys):
    assert main(["context", "set", "modelDataUri"]) == 2
    assert "expected KEY=VALUE, got 'modelDataUri'" in capsys.readouterr().err


def test_an_unmeasured_release_may_be_written_as_a_removal_reads_it(cdk_json):
    """The release goes into cdk.json before its first deployment is measured; the capacity
    refusal is the deploy's, not the writer's."""
    assert main(["context", "set", f"modelDataUri={MODEL}", f"decisionCpuImage={CPU_IMAGE}"]) == 0
    with pytest.raises(ValueError, match="no measurement of model"):
        AppConfig.from_context(context(cdk_json))


def test_the_docs_one_type_pool_command_survives_make_and_the_shell(cdk_json):
    """docs/deploy.md's command that switches the GPU endpoint on with one type: ARGS reaches
    the recipe's shell, which must hand ops a JSON list."""
    import re
    import subprocess

    (command,) = re.findall(
        r"make ops ARGS=\"context set decisionGpuEndpoint\.enabled=true \\\n[^\n]*\"",
        (ROOT / "docs" / "deploy.md").read_text(),
    )
    recipe = 'make() { ARGS="${2#ARGS=}"; eval "printf \'%s\\0\' $ARGS"; }\ntype=ml.g6e.xlarge\n'
    words = subprocess.run(
        ["bash", "-c", recipe + command], capture_output=True, text=True, check=True
    ).stdout.split("\0")[:-1]
    pool = 'decisionGpuEndpoint.instancePool=["ml.g6e.xlarge"]'
    assert words == ["context", "set", "decisionGpuEndpoint.enabled=true", pool]
    assert main(words) == 0
    gpu = AppConfig.from_context(context(cdk_json)).decision_gpu_endpoint
    assert gpu.instance_pool == ["ml.g6e.xlarge"]


def test_a_value_keeps_every_equals_sign_after_the_first(cdk_json, capsys):
    uri = "s3://models-bucket/date=2026-01-01/model.tar.gz"
    assert main(["context", "set", f"modelDataUri={uri}", f"decisionCpuImage={CPU_IMAGE}"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f'cdk.json: modelDataUri = "{uri}"'
    assert context(cdk_json)["modelDataUri"] == uri


def test_unset_keeps_an_object_that_still_holds_other_keys(cdk_json, capsys):
    """Three levels deep: the emptied object goes, its parent, holding another key, stays."""
    argv = ["decisionCpuEndpoint.autoscaling.maxCapacity=2", "decisionCpuEndpoint.measuring=true"]
    assert main(["context", "set", *argv]) == 0
    assert main(["context", "unset", "decisionCpuEndpoint.autoscaling.maxCapacity"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "cdk.json: decisionCpuEndpoint.autoscaling.maxCapacity unset"
    )
    assert context(cdk_json)["decisionCpuEndpoint"] == {"measuring": True}
    assert main(["context", "unset", "decisionCpuEndpoint.measuring"]) == 0
    assert "decisionCpuEndpoint" not in context(cdk_json)


def test_unset_under_an_object_that_is_not_there_was_not_set(cdk_json, capsys):
    original = cdk_json.read_text()
    assert "decisionGpuEndpoint" not in context(cdk_json)
    assert main(["context", "unset", "decisionGpuEndpoint.enabled"]) == 0
    assert capsys.readouterr().out == "cdk.json: decisionGpuEndpoint.enabled was not set\n"
    assert cdk_json.read_text() == original


@pytest.mark.parametrize(
    "key", ["decisionCpuEndpoint..measuring", ".modelDataUri", "modelDataUri."]
)
def test_a_key_with_an_empty_name_is_refused(cdk_json, capsys, key):
    assert main(["context", "set", f"{key}=x"]) == 2
    err = capsys.readouterr().err
    assert err == f"ops: error: {key!r} is not a context key (names joined by dots)\n"


def test_a_key_cannot_reach_into_a_value():
    from ops.context import ContextError, assign

    context = {"modelDataUri": "s3://b/m.tar.gz"}
    with pytest.raises(ContextError, match=r"^modelDataUri\.x: modelDataUri holds a value, not an"):
        assign(context, "modelDataUri.x=1")
    assert context == {"modelDataUri": "s3://b/m.tar.gz"}


def test_a_cdk_json_without_context_gets_one(tmp_path):
    from ops.context import update

    path = tmp_path / "cdk.json"
    path.write_text('{"app": "python3 app.py"}\n')
    assert update("set", ["decisionCpuEndpoint.measuring=true"], path) == [
        "decisionCpuEndpoint.measuring = true"
    ]
    assert json.loads(path.read_text()) == {
        "app": "python3 app.py",
        "context": {"decisionCpuEndpoint": {"measuring": True}},
    }


def test_only_set_and_unset_are_actions(cdk_json, capsys):
    original = cdk_json.read_text()
    with pytest.raises(SystemExit) as exit:
        main(["context", "drop", "modelDataUri"])
    assert exit.value.code == 2
    assert "invalid choice: 'drop'" in capsys.readouterr().err
    assert cdk_json.read_text() == original
