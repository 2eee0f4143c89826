"""ops's command line itself: the parser's defaults and refusals, and the boto3 clients it makes."""

import argparse

import pytest

from ops.cli import build_parser, main
from ops.clients import boto3_clients


def all_actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from all_actions(sub)
        elif not isinstance(action, argparse._HelpAction):
            yield action


def test_every_option_and_command_explains_itself():
    parser = build_parser()
    undocumented = [a.dest for a in all_actions(parser) if not a.help]
    assert undocumented == []
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert all(choice.help for choice in commands._choices_actions)
    assert parser.description


def test_each_json_option_says_what_it_prints():
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {
        name: next(a.help for a in sub._actions if a.dest == "json")
        for name, sub in commands.choices.items()
        if any(a.dest == "json" for a in sub._actions)
    }
    assert helps == {"invoke": "print the answer as JSON", "status": "print the status as JSON"}


def test_a_command_is_required(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([], clients=lambda s: pytest.fail("no AWS call expected"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m ops ")
    assert "the following arguments are required: command" in err


def test_an_unknown_build_target_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["build", "tpu-image"], clients=lambda s: pytest.fail("no AWS call expected"))
    assert exit_info.value.code == 2
    assert "invalid choice: 'tpu-image'" in capsys.readouterr().err


def test_build_defaults(monkeypatch):
    monkeypatch.setenv("OPS_STATEFUL_STACK", "Stateful")
    args = build_parser().parse_args(["build", "model"])
    assert (args.stack, args.poll_seconds, args.timeout_minutes, args.env) == (
        "Stateful",
        10.0,
        None,  # as long as the build may run (tests/ops/test_build.py)
        [],
    )
    monkeypatch.delenv("OPS_STATEFUL_STACK")
    assert build_parser().parse_args(["build", "model"]).stack is None


def test_invoke_defaults():
    args = build_parser().parse_args(["invoke", "--url", "http://x"])
    assert (args.body, args.path, args.max_attempts, args.json) == ("-", "/invocations", 6, False)


def test_sagemaker_runtime_client_has_one_retry_layer_and_outwaits_the_60s_limit():
    make = boto3_clients("eu-west-1")
    runtime = make("sagemaker-runtime")
    assert runtime.meta.service_model.service_name == "sagemaker-runtime"
    assert runtime.meta.region_name == "eu-west-1"
    assert runtime.meta.config.retries["total_max_attempts"] == 1
    assert runtime.meta.config.read_timeout == 70
    # Other services keep botocore's defaults (its own retries, 60 s reads).
    control = make("sagemaker")
    assert control.meta.service_model.service_name == "sagemaker"
    assert control.meta.config.read_timeout == 60
    assert control.meta.config.retries.get("total_max_attempts") != 1
