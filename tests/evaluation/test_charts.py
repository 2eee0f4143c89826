"""The reliability diagram an evaluation draws."""

from evaluation import charts

PNG = b"\x89PNG\r\n\x1a\n"


def test_reliability_diagram_renders(tmp_path):
    bins = [
        {
            "lower": i / 10,
            "upper": (i + 1) / 10,
            "count": i % 3,
            "confidence": i / 10 + 0.05 if i % 3 else None,
            "accuracy": 0.5 if i % 3 else None,
        }
        for i in range(10)
    ]
    result = {"reliability": bins, "metrics": {"n": 9, "accuracy": 0.5, "ece": 0.2, "brier": 0.6}}
    path = charts.reliability_diagram(result, tmp_path / "r.png")
    assert path.read_bytes()[:8] == PNG
