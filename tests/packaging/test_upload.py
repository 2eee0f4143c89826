"""Content-addressed upload, every S3 call answered by botocore's Stubber."""

import hashlib
import json

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.stub import ANY

from model_packaging.cli import main
from model_packaging.errors import PackagingError
from model_packaging.upload import archive_key, parse_s3_destination, upload_archive
from tests.support.aws_stubs import stubbed_client, without_aws_credentials
from tests.support.model_specs import tiny_spec

ARCHIVE_SHA = "ab" * 32


@pytest.fixture
def s3():
    with stubbed_client("s3", "us-east-1") as stubbed:
        yield stubbed


SPEC = "gemma3-270m"


def single_threaded():
    # Keeps the transfer in this thread so the Stubber sees calls in order.
    return TransferConfig(use_threads=False)


def test_key_names_the_spec_and_contains_the_archive_checksum():
    assert archive_key("models", "qwen", ARCHIVE_SHA) == f"models/qwen/{ARCHIVE_SHA}/model.tar.gz"
    assert archive_key("", "qwen", ARCHIVE_SHA) == f"qwen/{ARCHIVE_SHA}/model.tar.gz"
    assert parse_s3_destination("s3://bucket/models/qwen/") == ("bucket", "models/qwen")


@pytest.mark.parametrize("bad", ["bucket/prefix", "https://bucket/x", "s3:///prefix"])
def test_destination_must_be_an_s3_url(bad):
    with pytest.raises(PackagingError, match="s3://"):
        parse_s3_destination(bad)


def test_new_archive_is_uploaded_under_its_checksum(tmp_path, s3):
    client, stubber = s3
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(b"archive bytes")
    key = f"models/{SPEC}/{ARCHIVE_SHA}/model.tar.gz"
    stubber.add_response(
        "list_objects_v2",
        {"KeyCount": 0},
        expected_params={"Bucket": "bucket", "Prefix": key, "MaxKeys": 1},
    )
    stubber.add_response(
        "put_object",
        {"ETag": '"etag"'},
        expected_params={
            "Bucket": "bucket",
            "Key": key,
            "Body": ANY,
            "ContentType": "application/gzip",
            "Metadata": {"sha256": ARCHIVE_SHA},
            "ChecksumAlgorithm": ANY,
        },
    )
    uri = upload_archive(
        client, archive, ARCHIVE_SHA, "s3://bucket/models", single_threaded(), spec_name=SPEC
    )
    assert uri == f"s3://bucket/{key}"


def test_archive_already_present_is_not_uploaded_again(tmp_path, s3):
    client, stubber = s3
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(b"archive bytes")
    key = f"{SPEC}/{ARCHIVE_SHA}/model.tar.gz"
    stubber.add_response(
        "list_objects_v2",
        {"KeyCount": 1, "Contents": [{"Key": key, "Size": 13}]},
        expected_params={"Bucket": "bucket", "Prefix": key, "MaxKeys": 1},
    )
    # No put_object stubbed: an upload attempt would fail the test.
    uri = upload_archive(
        client, archive, ARCHIVE_SHA, "s3://bucket", single_threaded(), spec_name=SPEC
    )
    assert uri == f"s3://bucket/{key}"


def test_presence_is_asked_by_listing_never_by_head_object(tmp_path, s3):
    """HeadObject answers 403 for a missing key to the packaging role (its s3:ListBucket is
    limited to the model prefix), so a 403 must never count as present: presence is asked by
    a listing of the key, which that role may do. Only list_objects_v2 is stubbed here."""
    client, stubber = s3
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(b"x")
    key = f"p/{SPEC}/{ARCHIVE_SHA}/model.tar.gz"
    # A longer key under the same prefix is not the archive.
    stubber.add_response("list_objects_v2", {"Contents": [{"Key": key + ".partial"}]})
    stubber.add_response("put_object", {"ETag": '"etag"'})
    uri = upload_archive(
        client, archive, ARCHIVE_SHA, "s3://bucket/p", single_threaded(), spec_name=SPEC
    )
    assert uri == f"s3://bucket/{key}"


def test_a_real_access_denied_fails_clearly_naming_the_permission(tmp_path, s3):
    client, stubber = s3
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(b"x")
    stubber.add_client_error(
        "list_objects_v2", "AccessDenied", "Access Denied", http_status_code=403
    )
    with pytest.raises(PackagingError) as raised:
        upload_archive(
            client, archive, ARCHIVE_SHA, "s3://bucket/p", single_threaded(), spec_name=SPEC
        )
    assert str(raised.value) == (
        f"not allowed to check for s3://bucket/p/{SPEC}/{ARCHIVE_SHA}/model.tar.gz: the uploader "
        f"needs s3:ListBucket on bucket for the prefix p/{SPEC}/{ARCHIVE_SHA}/model.tar.gz "
        "(Access Denied)"
    )


def test_first_and_repeated_upload_against_moto_s3(tmp_path):
    """S3's own semantics (moto): the first upload lands at its key, the second adds nothing."""
    from moto import mock_aws

    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(b"archive bytes" * 1000)
    with mock_aws():
        client = boto3.client(
            "s3", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
        )
        client.create_bucket(Bucket="bucket")
        client.put_bucket_versioning(Bucket="bucket", VersioningConfiguration={"Status": "Enabled"})
        for _ in range(2):
            uri = upload_archive(client, archive, ARCHIVE_SHA, "s3://bucket/models", spec_name=SPEC)
        key = f"models/{SPEC}/{ARCHIVE_SHA}/model.tar.gz"
        assert uri == f"s3://bucket/{key}"
        versions = client.list_object_versions(Bucket="bucket")["Versions"]
        assert [v["Key"] for v in versions] == [key]
        head = client.head_object(Bucket="bucket", Key=key)
        assert head["Metadata"] == {"sha256": ARCHIVE_SHA}


def test_cli_upload_prints_the_model_uri(tmp_path, s3, capsys):
    client, stubber = s3
    spec = tiny_spec(tmp_path)
    out = tmp_path / "model.tar.gz"
    stubber.add_response("list_objects_v2", {"KeyCount": 0})
    stubber.add_response("put_object", {"ETag": '"etag"'})

    code = main(
        ["--spec", str(spec), "--output", str(out), "--upload", "s3://bucket/models"],
        s3_client=client,
    )

    archive_sha = hashlib.sha256(out.read_bytes()).hexdigest()
    assert code == 0
    spec_name = json.loads(spec.read_text())["name"]  # the manifest's spec, in the key
    assert capsys.readouterr().out.strip() == (
        f"s3://bucket/models/{spec_name}/{archive_sha}/model.tar.gz"
    )


def test_cli_refuses_a_malformed_destination_before_packaging(tmp_path, capsys):
    out = tmp_path / "model.tar.gz"
    argv = ["--spec", str(tiny_spec(tmp_path)), "--output", str(out), "--upload", "bucket/models"]
    assert main(argv, s3_client=object()) == 1
    assert "upload destination must look like s3://BUCKET/PREFIX" in capsys.readouterr().err
    assert not out.exists()


def test_with_credentials_the_uploader_gets_an_s3_client(tmp_path, monkeypatch):
    from model_packaging.cli import _s3_client_for_upload

    without_aws_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert _s3_client_for_upload().meta.service_model.service_name == "s3"


@pytest.mark.parametrize(
    ("credentials", "region", "error"),
    [
        (
            False,
            "us-east-1",
            "--upload needs AWS credentials and none were found (environment, shared files, "
            "container or instance role); nothing was packaged",
        ),
        (
            True,
            "",  # botocore reads it as the region ""
            "--upload: the AWS region is set but empty (AWS_DEFAULT_REGION or the config file's "
            "region): unset it or name the bucket's region; nothing was packaged",
        ),
    ],
    ids=["no credentials", "empty region"],
)
def test_cli_refuses_an_unusable_aws_setup_before_packaging(
    tmp_path, monkeypatch, capsys, credentials, region, error
):
    without_aws_credentials(monkeypatch, tmp_path)
    if credentials:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    out = tmp_path / "model.tar.gz"
    argv = ["--spec", str(tiny_spec(tmp_path)), "--output", str(out), "--upload", "s3://b/m"]
    assert main(argv) == 1
    assert capsys.readouterr().err == f"model_packaging: error: {error}\n"
    assert not out.exists()


def test_cli_upload_refused_by_s3_is_one_line_and_keeps_the_archive(tmp_path, s3, capsys):
    client, stubber = s3
    out = tmp_path / "model.tar.gz"
    stubber.add_response("list_objects_v2", {"KeyCount": 0})
    stubber.add_client_error("put_object", "NoSuchBucket", "The bucket does not exist", 404)
    argv = ["--spec", str(tiny_spec(tmp_path)), "--output", str(out), "--upload", "s3://b/m"]
    assert main(argv, s3_client=client) == 1
    *progress, error = capsys.readouterr().err.splitlines()  # progress: the files packaged
    assert error.startswith("model_packaging: error: upload to s3://b/m failed: ")
    assert "NoSuchBucket" in error and error.endswith(f"; the archive stays at {out}")
    assert progress[-1].startswith("archive ") and out.is_file()
