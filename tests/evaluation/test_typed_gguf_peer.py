"""python -m evaluation --peer typed-gguf: the side-by-side of two reports, the command's refusals,
and typed-gguf started for real on SmolLM2 beside the adapter, through the evaluation's path."""

import json
import math
from pathlib import Path

import pytest

from evaluation import cli, labelled, peer_compare, typed_gguf_peer
from evaluation.labelled import Case
from launcher.models import local_model

SPLIT = labelled.DATA / "readout_test.jsonl"
SHA = "ab" * 32


def case(item: str, category: str, probabilities: list[float], expected: str) -> Case:
    options = ["billing", "tech", "other"][: len(probabilities)]
    return Case(item, category, options, probabilities, [], expected, 0.01, model={})


def a_report(cases: list[Case], source: Path, sha256: str | None = SHA) -> dict:
    result = cli.report(cases, source=source, target="t", fit=False, pairs=None)
    result["model"] = {"gguf_sha256": sha256} if sha256 else {}
    return result


def two_reports(tmp_path: Path) -> tuple[dict, dict]:
    source = tmp_path / "split.jsonl"
    source.write_text("{}\n")
    ours = a_report(
        [
            case("1/q", "routing.queue", [0.7, 0.2, 0.1], "billing"),
            case("2/q", "routing.queue", [0.6, 0.3, 0.1], "tech"),
            case("1/a", "sentiment.is_angry", [0.9, 0.1], "billing"),
        ],
        source,
    )
    theirs = a_report(
        [
            case("1/q", "routing.queue", [0.5, 0.4, 0.1], "billing"),
            case("2/q", "routing.queue", [0.2, 0.7, 0.1], "tech"),
            case("1/a", "sentiment.is_angry", [0.1, 0.9], "billing"),
        ],
        source,
    )
    return ours, theirs


def test_the_side_by_side_sets_each_question_and_kind_beside_its_majority(tmp_path):
    ours, theirs = two_reports(tmp_path)
    side = peer_compare.compare({"adapter": ours, "typed-gguf": theirs})
    queue = side["by_category"]["routing.queue"]
    assert (queue["n"], queue["majority"]) == (2, 0.5)
    assert (queue["adapter"]["accuracy"], queue["typed-gguf"]["accuracy"]) == (0.5, 1.0)
    assert side["by_kind"]["sentiment"]["typed-gguf"]["accuracy"] == 0.0
    assert side["questions_vs_majority"] == {
        "adapter": {"at_or_above": 2, "of": 2},
        "typed-gguf": {"at_or_above": 1, "of": 2},
    }
    assert side["overall"]["typed-gguf"]["accuracy"] == pytest.approx(2 / 3)
    assert side["overall"]["adapter"]["nll"] == pytest.approx(
        -(math.log(0.7) + math.log(0.3) + math.log(0.9)) / 3
    )
    assert "routing.queue" in peer_compare.render(side)


def test_reports_of_other_questions_or_another_gguf_are_not_set_side_by_side(tmp_path):
    ours, theirs = two_reports(tmp_path)
    fewer = {**theirs, "items": theirs["items"][:2]}
    with pytest.raises(peer_compare.NotComparable, match="different questions"):
        peer_compare.compare({"adapter": ours, "typed-gguf": fewer})
    other = {**theirs, "model": {"gguf_sha256": "cd" * 32}}
    with pytest.raises(peer_compare.NotComparable, match="GGUF"):
        peer_compare.compare({"adapter": ours, "typed-gguf": other})


def test_two_committed_reports_are_set_side_by_side_from_the_command_line(tmp_path, capsys):
    ours, theirs = two_reports(tmp_path)
    paths = {}
    for name, report in (("adapter", ours), ("typed-gguf", theirs)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(report))
    out = tmp_path / "side" / "side_by_side.json"
    columns = [f"{name}={path}" for name, path in paths.items()]
    assert peer_compare.main([*columns, "--out", str(out)]) == 0
    side = json.loads(out.read_text())
    assert (
        side["overall"] == peer_compare.compare({"adapter": ours, "typed-gguf": theirs})["overall"]
    )
    assert side["reports"] == {name: str(path) for name, path in paths.items()}
    assert "routing.queue" in capsys.readouterr().out
    fewer = tmp_path / "fewer.json"
    fewer.write_text(json.dumps({**theirs, "items": theirs["items"][:2]}))
    assert peer_compare.main([columns[0], f"typed-gguf={fewer}", "--out", str(out)]) == 1
    assert "different questions" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--peer", "typed-gguf"], "--peer needs --gguf"),
        (["--gguf", str(SPLIT)], "go with --peer"),
        (["--peer", "typed-gguf", "--gguf", str(SPLIT)], "the adapter's column"),
        (
            ["--peer", "typed-gguf", "--gguf", str(SPLIT), "--beside", "r.json", "--url", "x"],
            "not both",
        ),
        (
            ["--peer", "typed-gguf", "--gguf", str(SPLIT), "--url", "x", "--temperature", "2"],
            "no --temperature",
        ),
    ],
)
def test_the_peer_options_refuse_what_cannot_make_a_side_by_side(extra, message, capsys):
    assert cli.main([str(SPLIT), *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_report_of_another_gguf_is_refused_before_the_peer_starts(tmp_path, capsys):
    committed = SPLIT.parent.parent / "results/readout-default/qwen2.5-coder-1.5b-test/report.json"
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF not the 1.5B")
    code = cli.main(
        [str(SPLIT), "--peer", "typed-gguf", "--gguf", str(other), "--beside", str(committed)]
    )
    assert code == 1
    assert "adapter ran cc324af070c2" in capsys.readouterr().err


@pytest.mark.real_model
def test_typed_gguf_answers_a_split_beside_the_adapter_on_smollm2(tmp_path, monkeypatch):
    """Both servers for real on SmolLM2-135M-Instruct, the first items of the held-out split
    through python -m evaluation --peer: every question the peer answers is a distribution over the
    question's own candidates, and both columns score the same questions."""
    from launcher import running_adapter

    gguf = local_model("smollm2")
    answers: list[tuple[str, dict, dict]] = []
    send = cli.Target.send

    def recorded(self, kind, body):
        answer, seconds, retries = send(self, kind, body)
        answers.append((self.description, body, answer))
        return answer, seconds, retries

    monkeypatch.setattr(cli.Target, "send", recorded)
    out = tmp_path / "out"
    with running_adapter(tmp_path, DECISION_MODEL_PATH=str(gguf)) as adapter:
        code = cli.main(
            [str(SPLIT), "--peer", "typed-gguf", "--gguf", str(gguf), "--url", adapter.url]
            + ["--limit", "2", "--out", str(out), "--no-progress"]
        )
    assert code == 0
    theirs = [(body, answer) for target, body, answer in answers if target.startswith("typed")]
    assert len(theirs) == 2
    for body, answer in theirs:
        assert set(answer["answers"]) == set(body["questions"])
        for qid, question in body["questions"].items():
            got = answer["answers"][qid]
            if question["type"] == "noul":
                candidates = {"yes", "no"}
            elif question["type"] == "choice":
                candidates = set(question["criteria"])
            else:  # score: its levels by index
                candidates = {str(level) for level in range(len(question["criteria"]))}
            assert set(got["probabilities"]) == candidates, qid
            # Rounded to six significant digits on the wire.
            assert sum(got["probabilities"].values()) == pytest.approx(1, abs=1e-5), qid
            assert all(0 <= p <= 1 for p in got["probabilities"].values()), qid
    side = json.loads((out / "side_by_side.json").read_text())
    assert side["columns"] == ["adapter", "typed-gguf"]
    assert side["overall"]["adapter"]["n"] == side["overall"]["typed-gguf"]["n"] == 6
    assert side["models"]["typed-gguf"]["gguf_sha256"] == typed_gguf_peer.sha256_of(gguf)
    peer = json.loads((out / "typed-gguf" / "report.json").read_text())
    assert peer["peer"]["runtime_dir"].endswith("llama_cpp/lib")
