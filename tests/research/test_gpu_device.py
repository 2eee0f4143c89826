"""The device runner's CPU paths: the kit's wheels installed offline, the benchmark's command,
its output copied into the log, and a run past its time stopped, then killed."""

import signal
import sys

from research.gpu_batching import gpu_device as gd


def test_the_kits_wheels_install_offline_into_the_site_folder(tmp_path):
    assert gd.wheel_command(tmp_path, tmp_path / "site") is None  # no wheels, nothing to do
    (tmp_path / "whl").mkdir()
    (tmp_path / "whl" / "starlette-0.1-py3-none-any.whl").write_text("")
    command = gd.wheel_command(tmp_path, tmp_path / "site")
    assert command is not None and "--no-index" in command
    assert command[command.index("--target") + 1] == str(tmp_path / "site")
    assert command[-1].endswith("starlette-0.1-py3-none-any.whl")


def test_the_benchmark_gets_the_deadline_and_the_words_after_the_command(tmp_path):
    command = gd.batching_command(tmp_path, 487.25, ["--bisect-only"])
    assert command[1:3] == ["-m", "research.gpu_batching.gpu_batching"]
    assert command[command.index("--deadline-s") + 1] == "487.25"
    assert command[-1] == "--bisect-only"


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_runs_output_is_copied_into_the_log(tmp_path):
    log = tmp_path / "log.txt"
    code = "import sys; print('built'); print('bisected', file=sys.stderr); sys.exit(3)"
    assert gd.run_logged(_python(code), gd.child_env(None), log, stop_after_s=30) == 3
    assert log.read_text().splitlines() == ["built", "bisected"]


def test_a_run_past_its_time_is_stopped_then_killed(tmp_path):
    log = tmp_path / "log.txt"
    sleeper = "import time; print('measuring', flush=True); time.sleep(60)"
    status = gd.run_logged(_python(sleeper), gd.child_env(None), log, stop_after_s=0.5)
    assert status == -signal.SIGTERM
    assert "time is up" in log.read_text() and "measuring" in log.read_text()
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('busy', flush=True); time.sleep(60)"
    )
    status = gd.run_logged(_python(stubborn), gd.child_env(None), log, 0.5, kill_after_s=0.5)
    assert status == -signal.SIGKILL
