"""python -m evaluation FILE.jsonl: accuracy and calibration of a served decision model.

Runs each labelled decision (or System One question) against a local adapter (--url) or a
SageMaker endpoint (--endpoint, through boto3's sagemaker-runtime) with the operator CLI's
transports and 503 retries, then reports accuracy, Brier score, expected calibration error
(10 bins), negative log-likelihood, p50/p95 latency and a reliability diagram (PNG).

Each question's category (`routing.queue`: kind `routing`) is reported beside its majority-class
baseline (always answering its most common label), so a readout that only echoes a prior shows.

--fit-temperature fits one softmax temperature on the file (NLL of softmax(option_logits / T))
and writes calibration.json for the adapter (it reads `temperature` from the file beside the
GGUF, and refuses it for another GGUF than `gguf_sha256`). --order-check sends every decision
again with its options reversed and reports how far the probabilities move.

--choose-readout letters,option_text,... runs FILE (the dev split) once per readout strategy the
adapter offers, ranks them by the targets (every question at or above its majority class, top
option changes on reversal <= 10%, cost <= 2x letters; then accuracy and NLL), fits the winner's
temperature on FILE, measures it on --test (a split never tuned on) and writes the per-model
file (calibration.json) with `readout` and `temperature`. See evaluation/readout_choice.py.

--peer typed-gguf --gguf PATH runs FILE on typed-gguf (a published decision server, with its
defaults, evaluation/typed_gguf_peer.py) serving the same GGUF too, and writes side_by_side.json
(evaluation/peer_compare.py) beside both reports: the adapter's column is --url/--endpoint evaluated
now, or --beside REPORT, a report.json of ours on the same file (it must name the same GGUF).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from evaluation import labelled, metrics, peer_compare, readout_choice
from evaluation.labelled import Case, Item, LabelError
from ops.retry import Backoff, RetriesExhausted, call_with_retries
from ops.transports import HttpTransport, InvalidUrl, InvokeFailed, SageMakerTransport

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "evaluate"


class Target:
    """Where requests go: one transport per wire format, with the ops CLI's retry policy."""

    sleep = staticmethod(time.sleep)  # between retries; tests replace it

    def __init__(self, transports: dict[str, Any], description: str, max_attempts: int) -> None:
        self.transports = transports
        self.description = description
        self.backoff = Backoff(max_attempts=max_attempts)
        self.retries = 0

    @classmethod
    def url(cls, base_url: str, max_attempts: int, timeout_s: float) -> Target:
        return cls(
            {
                "decision": HttpTransport(base_url, path="/invocations", timeout_seconds=timeout_s),
                "systemone": HttpTransport(
                    base_url, path="/v1/systemone", timeout_seconds=timeout_s
                ),
            },
            base_url,
            max_attempts,
        )

    @classmethod
    def endpoint(cls, name: str, region: str | None, max_attempts: int) -> Target:
        from ops.clients import boto3_clients  # one retry layer (ours), SageMaker's read timeout

        client = boto3_clients(region)("sagemaker-runtime")
        return cls(
            {
                "decision": SageMakerTransport(client, name),
                # /invocations picks the System One format from SageMaker's custom attributes.
                "systemone": SageMakerTransport(client, name, custom_attributes="format=systemone"),
            },
            f"endpoint {name}",
            max_attempts,
        )

    def send(self, kind: str, body: dict[str, Any]) -> tuple[dict[str, Any], float, int]:
        """(answer, seconds including retries, retries)."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        retries = 0

        def count(*_: object) -> None:
            nonlocal retries
            retries += 1

        started = time.perf_counter()
        reply = call_with_retries(
            lambda: self.transports[kind].send(payload),
            self.backoff,
            sleep=self.sleep,
            on_retry=count,
        )
        elapsed = time.perf_counter() - started
        self.retries += retries
        return json.loads(reply.body), elapsed, retries


def run(
    items: list[Item], target: Any, *, order_check: bool, progress: bool
) -> tuple[list[Case], list[tuple[dict[str, float], dict[str, float], str]]]:
    """Score every item (and its reversed twin); returns the cases and the (original,
    reversed, id) probability pairs for the order check. `target` is a Target, a readout
    strategy with the same `send`, or a bare `send(kind, body)` callable."""
    from tqdm import tqdm

    send = getattr(target, "send", target)
    cases: list[Case] = []
    pairs: list[tuple[dict[str, float], dict[str, float], str]] = []
    requests = len(items) + (sum(item.reversible for item in items) if order_check else 0)
    with tqdm(
        total=requests,
        desc="evaluate",
        unit="req",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
        for item in items:
            answer, seconds, retries = send(item.kind, item.body())
            scored = item.cases(answer, seconds, retries)
            cases += scored
            bar.update()
            if order_check and item.reversible:
                answer, _, _ = send(item.kind, item.body(reverse=True))
                again = {c.item_id: c for c in item.cases(answer, seconds, retries)}
                for case in scored:
                    if item.reorderable(case.item_id):
                        pairs.append((case.by_id, again[case.item_id].by_id, case.item_id))
                bar.update()
            bar.set_postfix(acc=f"{sum(c.predicted == c.expected for c in cases) / len(cases):.2f}")
    return cases, pairs


def choose_readout(
    dev: list[Item],
    test: list[Item],
    strategies: dict[str, Any],
    *,
    dev_file: Path,
    test_file: Path,
    progress: bool = False,
) -> dict[str, Any]:
    """Run every strategy on dev (with reversed twins), rank them, fit the winner's temperature
    on dev and measure it on test; returns the reports and the per-model file's content."""
    reports: dict[str, dict[str, Any]] = {}
    dev_cases: dict[str, list[Case]] = {}
    for name, strategy in strategies.items():
        cases, pairs = run(dev, strategy, order_check=True, progress=progress)
        dev_cases[name] = cases
        reports[name] = readout_choice.strategy_report(cases, pairs)
    ranking = readout_choice.rank(reports, "letters" if "letters" in reports else None)
    winner = ranking[0][0]
    test_cases, _ = run(test, strategies[winner], order_check=False, progress=progress)
    held = readout_choice.fit_and_hold_out(dev_cases[winner], test_cases)
    model = next((c.model for c in dev_cases[winner] if c.model), {})
    created = datetime.now(UTC).isoformat(timespec="seconds")
    return {
        "dev": str(dev_file),
        "test": str(test_file),
        "strategies": reports,
        "ranking": [{"readout": n, "missed": m} for n, m in ranking],
        "winner": winner,
        "test_at_temperature": held.test,
        "calibration": readout_choice.readout_file(
            winner,
            held,
            dev_file=dev_file,
            test_file=test_file,
            gguf_sha256=model.get("gguf_sha256"),
            ranking=ranking,
            created_at=created,
        ),
    }


def _auc_text(auc: float | None) -> str:
    return " -  " if auc is None else f"{auc:.2f}"  # None: every item has the same answer


def render_choice(choice: dict[str, Any]) -> str:
    lines = [f"readouts on {choice['dev']} (ranked; held-out: {choice['test']}):"]
    for entry in choice["ranking"]:
        report = choice["strategies"][entry["readout"]]
        lines.append(
            f"  {entry['readout']:<16} accuracy {report['accuracy']:.3f}  NLL {report['nll']:.4f}"
            f"  ECE(10) {report['ece']:.4f}  order change "
            f"{report.get('order_change_rate', 0.0):.0%}  p50 {report['latency']['p50_ms']:.1f} ms"
            f"  below majority {len(report['below_majority'])}"
            + (f"  missed: {'; '.join(entry['missed'])}" if entry["missed"] else "")
        )
    held, calibration = choice["test_at_temperature"], choice["calibration"]
    if held:
        lines.append(
            f"  chosen {choice['winner']} at temperature {calibration['temperature']:g}: held-out "
            f"accuracy {held['accuracy']:.3f}  ECE(10) {held['ece']:.4f}  NLL {held['nll']:.4f}"
        )
        # AUC near 0.5: the model does not read the question; well above: it does, but leans wrong
        below = [
            f"{name} (AUC {_auc_text(held['by_question'][name]['auc'])})"
            for name in held["below_majority"]
        ]
        if below:
            lines.append(f"  held-out questions below their majority: {', '.join(below)}")
    return "\n".join(lines)


def report(
    cases: list[Case],
    *,
    source: Path,
    target: str,
    fit: bool,
    pairs: list[tuple[dict[str, float], dict[str, float], str]] | None,
    temperature: float | None = None,
) -> dict[str, Any]:
    probabilities = [c.probabilities for c in cases]
    expected = [c.expected_index for c in cases]
    model = next((c.model for c in cases if c.model), {})
    served = {c.served_temperature for c in cases if c.served_temperature is not None}
    readouts = sorted({c.served_readout for c in cases if c.served_readout is not None})
    result: dict[str, Any] = {
        "file": str(source),
        "file_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
        "target": target,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": {k: model.get(k) for k in ("name", "gguf_file", "gguf_sha256") if model.get(k)},
        "served_temperature": served.pop() if len(served) == 1 else sorted(served) or None,
        "served_readout": readouts[0] if len(readouts) == 1 else readouts or None,
        "metrics": metrics.summary(probabilities, expected),
        "by_category": readout_choice.grouped(cases, lambda c: c.category),
        "by_kind": readout_choice.grouped(cases, lambda c: readout_choice.kind_of(c.category)),
        "latency": metrics.latency_summary([c.latency_s for c in cases]),
        "retries": sum(c.retries for c in cases),
        "reliability": [b.as_dict() for b in metrics.reliability_bins(probabilities, expected)],
        "items": [
            {
                "id": c.item_id,
                "category": c.category,
                "expected": c.expected,
                "predicted": c.predicted,
                "probabilities": {k: round(p, 6) for k, p in c.by_id.items()},
                # The raw option logits: a temperature can be refitted from the report alone.
                "logits": dict(zip(c.option_ids, c.logits, strict=True)) if c.logits else None,
                "latency_ms": round(c.latency_s * 1000, 2),
            }
            for c in cases
        ],
    }
    if fit:
        with_logits = [c for c in cases if len(c.logits) == len(c.option_ids)]
        logits = [c.logits for c in with_logits]
        labels = [c.expected_index for c in with_logits]
        found = metrics.fit_temperature(logits, labels)
        calibrated = [metrics.softmax(z, found.temperature).tolist() for z in logits]
        result["temperature_fit"] = {
            "temperature": found.temperature,
            "n": len(with_logits),
            "nll_before": found.nll_before,
            "nll_after": found.nll_after,
            "bounds": list(metrics.TEMPERATURE_BOUNDS),
            "metrics_before": metrics.summary(
                [metrics.softmax(z).tolist() for z in logits], labels
            ),
            "metrics_after": metrics.summary(calibrated, labels),
        }
    if temperature is not None:
        # A temperature fitted on another file, applied here to the raw logits: held-out
        # metrics without restarting the adapter.
        with_logits = [c for c in cases if len(c.logits) == len(c.option_ids)]
        result["at_temperature"] = {
            "temperature": temperature,
            **metrics.summary(
                [metrics.softmax(c.logits, temperature).tolist() for c in with_logits],
                [c.expected_index for c in with_logits],
            ),
        }
    if pairs is not None:
        if pairs:
            result["order_check"] = metrics.order_sensitivity(
                [a for a, _, _ in pairs], [b for _, b, _ in pairs]
            )
            result["order_check"]["per_item"] = [
                {
                    "id": name,
                    "max_abs_diff": round(max(abs(a[k] - b[k]) for k in a), 6),
                    "argmax_changed": max(a, key=a.__getitem__) != max(a, key=b.__getitem__),
                    "original": {k: round(v, 6) for k, v in a.items()},
                    "reversed": {k: round(b[k], 6) for k in a},
                }
                for a, b, name in pairs
            ]
        else:
            result["order_check"] = {"items": 0}
    return result


def calibration_file(result: dict[str, Any]) -> dict[str, Any]:
    fit = result["temperature_fit"]
    calibration = {
        "temperature": round(fit["temperature"], 6),
        "fitted_on": Path(result["file"]).name,
        "n": fit["n"],
        "nll_before": round(fit["nll_before"], 6),
        "nll_after": round(fit["nll_after"], 6),
        "file_sha256": result["file_sha256"],
        "created_at": result["date"],
        "applies_to": "option_logits (softmax(option_logits / temperature))",
    }
    if result["model"].get("gguf_sha256"):
        # The adapter refuses this file beside any other GGUF.
        calibration["gguf_sha256"] = result["model"]["gguf_sha256"]
    return calibration


def render(result: dict[str, Any]) -> str:
    m, lat = result["metrics"], result["latency"]
    lines = [
        f"{result['file']} against {result['target']}: {m['n']} scored questions",
        f"  accuracy {m['accuracy']:.3f}   Brier {m['brier']:.4f}   ECE(10) {m['ece']:.4f}   "
        f"NLL {m['nll']:.4f}",
        f"  latency p50 {lat['p50_ms']:.1f} ms   p95 {lat['p95_ms']:.1f} ms   "
        f"(retries after 503: {result['retries']})",
    ]
    for name, group in result["by_category"].items():
        lines.append(
            f"  {name:<12} accuracy {group['accuracy']:.3f}  majority {group['majority']:.3f}"
            f"  AUC {_auc_text(group['auc'])}  (n={group['n']})"
        )
    if "temperature_fit" in result:
        fit = result["temperature_fit"]
        lines.append(
            f"  temperature {fit['temperature']:.4f}: NLL {fit['nll_before']:.4f} -> "
            f"{fit['nll_after']:.4f}, ECE {fit['metrics_before']['ece']:.4f} -> "
            f"{fit['metrics_after']['ece']:.4f}"
        )
    if "at_temperature" in result:
        at = result["at_temperature"]
        lines.append(
            f"  at temperature {at['temperature']:g} (raw logits): Brier {at['brier']:.4f}"
            f"   ECE(10) {at['ece']:.4f}   NLL {at['nll']:.4f}"
        )
    if result.get("order_check", {}).get("items"):
        oc = result["order_check"]
        lines.append(
            f"  options reversed: mean |dp| {oc['mean_abs_diff']:.4f}, max |dp| "
            f"{oc['max_abs_diff']:.4f}, top option changed in {oc['argmax_changed']}/"
            f"{oc['items']} ({oc['argmax_change_rate']:.0%})"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m evaluation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", type=Path, help="labelled JSONL (see evaluation/labelled.py)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", help="adapter base URL, e.g. http://127.0.0.1:8080")
    where.add_argument("--endpoint", help="SageMaker endpoint name (default: $OPS_ENDPOINT_NAME)")
    parser.add_argument("--region", help="AWS region for --endpoint")
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for report.json and reliability.png "
        "(default: evaluation/results/evaluate/<file name>)",
    )
    parser.add_argument(
        "--fit-temperature",
        action="store_true",
        help="fit one temperature on this file and write calibration.json",
    )
    parser.add_argument(
        "--calibration", type=Path, help="where to write calibration.json (default: in --out)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        help="also report the metrics of softmax(option_logits / T), e.g. a "
        "temperature fitted on another file",
    )
    parser.add_argument(
        "--order-check", action="store_true", help="re-run each decision with its options reversed"
    )
    parser.add_argument(
        "--choose-readout",
        metavar="NAMES",
        help="comma-separated readout strategies to compare on FILE (the dev split); needs --test",
    )
    parser.add_argument(
        "--test", type=Path, help="held-out labelled JSONL for --choose-readout (never tuned on)"
    )
    parser.add_argument(
        "--peer",
        choices=["typed-gguf"],
        help="also run FILE on this peer server serving --gguf, and write side_by_side.json",
    )
    parser.add_argument("--gguf", type=Path, help="the GGUF the peer serves (with --peer)")
    parser.add_argument(
        "--beside",
        type=Path,
        metavar="REPORT",
        help="with --peer: the adapter's report.json on FILE, instead of --url/--endpoint",
    )
    parser.add_argument("--limit", type=int, help="evaluate only the first N items")
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=Backoff.max_attempts,
        help="attempts per request when the model answers 503",
    )
    parser.add_argument("--timeout", type=float, default=65.0, help="seconds per HTTP request")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    return parser


# What ends a run against its target: refusals left after the retries, and AWS errors the
# transports do not read themselves (no credentials or region, an endpoint that does not exist).
TARGET_FAILURES = (RetriesExhausted, InvokeFailed, BotoCoreError, ClientError)


def _target_failed(error: Exception) -> int:
    detail = f": {error.body}" if isinstance(error, InvokeFailed) and error.body else ""
    aws = "AWS: " if isinstance(error, (BotoCoreError, ClientError)) else ""
    print(f"evaluation: error: {aws}{error}{detail}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        items = labelled.load(args.file)
    except (OSError, LabelError) as error:
        print(f"evaluation: error: {error}", file=sys.stderr)
        return 2
    if args.limit:
        items = items[: args.limit]
    if args.choose_readout and not args.test:
        print("evaluation: error: --choose-readout needs --test FILE", file=sys.stderr)
        return 2
    test_items: list[Item] = []
    if args.test:
        try:
            test_items = labelled.load(args.test)
        except (OSError, LabelError) as error:
            print(f"evaluation: error: {error}", file=sys.stderr)
            return 2
    if args.peer or args.gguf or args.beside:
        refused = _peer_refusal(args)
        if refused:
            print(f"evaluation: error: {refused}", file=sys.stderr)
            return 2
        if args.beside:
            return _peer(args, items, None)
    if args.url:
        try:
            target = Target.url(args.url, args.max_attempts, args.timeout)
        except InvalidUrl as error:
            print(f"evaluation: error: --url {error}", file=sys.stderr)
            return 2
    else:
        endpoint = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME")
        if not endpoint:
            print("evaluation: error: pass --url URL or --endpoint NAME", file=sys.stderr)
            return 2
        try:
            target = Target.endpoint(endpoint, args.region, args.max_attempts)
        except TARGET_FAILURES as error:
            return _target_failed(error)
    if args.choose_readout:
        return _choose(args, items, test_items, target)
    if args.peer:
        return _peer(args, items, target)
    try:
        cases, pairs = run(
            items, target, order_check=args.order_check, progress=not args.no_progress
        )
    except TARGET_FAILURES as error:
        return _target_failed(error)
    if args.temperature is not None and args.temperature <= 0:
        print("evaluation: error: --temperature must be positive", file=sys.stderr)
        return 2
    result = report(
        cases,
        source=args.file,
        target=target.description,
        fit=args.fit_temperature,
        pairs=pairs if args.order_check else None,
        temperature=args.temperature,
    )

    out = args.out or DEFAULT_OUT / args.file.stem
    out.mkdir(parents=True, exist_ok=True)
    from evaluation.charts import reliability_diagram

    result["reliability_png"] = str(reliability_diagram(result, out / "reliability.png"))
    if args.fit_temperature:
        path = args.calibration or out / "calibration.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(calibration_file(result), indent=2) + "\n")
        result["calibration_json"] = str(path)
    (out / "report.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else render(result))
    if not args.json:
        print(
            f"  report {out / 'report.json'}, diagram {result['reliability_png']}"
            + (f", calibration {result['calibration_json']}" if args.fit_temperature else "")
        )
    return 0


def _peer_refusal(args: argparse.Namespace) -> str | None:
    if not args.peer:
        return "--gguf and --beside go with --peer"
    if not args.gguf or not args.gguf.is_file():
        return f"--peer needs --gguf, the GGUF file it serves (got {args.gguf})"
    if args.beside and (args.url or args.endpoint):
        return "--beside is the adapter's column: pass it or --url/--endpoint, not both"
    if not args.beside and not (args.url or args.endpoint):
        return "--peer needs the adapter's column: --url, --endpoint or --beside REPORT"
    if args.choose_readout or args.fit_temperature or args.order_check:
        return "--peer runs each split once: no --choose-readout, --fit-temperature, --order-check"
    if args.temperature is not None:  # the peer answers no logits to rescale
        return "--peer compares the served probabilities: no --temperature"
    return None


def _evaluated(
    items: list[Item], target: Any, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """One column: FILE run on `target`, its report.json and diagram written into `out`."""
    cases, _ = run(items, target, order_check=False, progress=not args.no_progress)
    result = report(cases, source=args.file, target=target.description, fit=False, pairs=None)
    from evaluation.charts import reliability_diagram

    out.mkdir(parents=True, exist_ok=True)
    result["reliability_png"] = str(reliability_diagram(result, out / "reliability.png"))
    (out / "report.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


def _peer(args: argparse.Namespace, items: list[Item], target: Target | None) -> int:
    """The adapter's column (run now on `target`, or --beside) and the peer's, side by side."""
    from evaluation import typed_gguf_peer

    out = args.out or DEFAULT_OUT / f"{args.file.stem}-{args.peer}"
    sha256 = typed_gguf_peer.sha256_of(args.gguf)
    try:
        if target is None:
            ours = json.loads(args.beside.read_text())
            ours_source = str(args.beside)
        else:
            ours = _evaluated(items, target, args, out / "adapter")
            ours_source = str(out / "adapter" / "report.json")
        # The check before the peer's run, not after it: a wrong --beside costs nothing.
        peer_compare.check_comparable(
            {"adapter": ours, args.peer: {**ours, "model": {"gguf_sha256": sha256}}}
        )
        logs = Path(tempfile.mkdtemp(prefix=f"{args.peer}-logs-"))
        with typed_gguf_peer.running_typed_gguf(args.gguf, logs, sha256=sha256) as (server, info):
            peer_target = Target.url(server.url, args.max_attempts, args.timeout)
            peer_target.description = f"{args.peer} {info['version']} at {server.url}"
            theirs = _evaluated(items, peer_target, args, out / args.peer)
        # The peer answers no model block: the GGUF it served is the one registered.
        theirs["model"] = {"gguf_file": args.gguf.name, "gguf_sha256": sha256}
        theirs["peer"] = info
        (out / args.peer / "report.json").write_text(
            json.dumps(theirs, indent=2, ensure_ascii=False) + "\n"
        )
        side = peer_compare.compare({"adapter": ours, args.peer: theirs})
    except TARGET_FAILURES as error:
        return _target_failed(error)
    except (OSError, ValueError, RuntimeError) as error:  # PeerUnavailable, a report, a GGUF
        print(f"evaluation: error: {error}", file=sys.stderr)
        return 1
    side["reports"] = {"adapter": ours_source, args.peer: str(out / args.peer / "report.json")}
    (out / "side_by_side.json").write_text(json.dumps(side, indent=2, ensure_ascii=False) + "\n")
    print(peer_compare.render(side))
    print(f"  side by side {out / 'side_by_side.json'}")
    return 0


def _choose(args: argparse.Namespace, dev: list[Item], test: list[Item], target: Target) -> int:
    names = [n.strip() for n in args.choose_readout.split(",") if n.strip()]
    strategies = {n: readout_choice.AdapterReadout(target, n) for n in names}
    try:
        choice = choose_readout(
            dev,
            test,
            strategies,
            dev_file=args.file,
            test_file=args.test,
            progress=not args.no_progress,
        )
    except TARGET_FAILURES as error:
        return _target_failed(error)
    out = args.out or DEFAULT_OUT / f"{args.file.stem}-readouts"
    out.mkdir(parents=True, exist_ok=True)
    path = args.calibration or out / "calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(choice["calibration"], indent=2) + "\n")
    (out / "choose_readout.json").write_text(json.dumps(choice, indent=2) + "\n")
    print(render_choice(choice))
    print(f"  report {out / 'choose_readout.json'}, per-model file {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
