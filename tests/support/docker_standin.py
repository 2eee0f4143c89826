"""`docker` for the CodeBuild rehearsal: no engine, but every check a real build would fail on
before it runs a layer, and a push that lands in the (moto) ECR repository.

- `login --password-stdin REGISTRY`: refuses an empty password (a failed `get-login-password`).
- `build -f DOCKERFILE [--build-arg N=V]... -t TAG CONTEXT`: the Dockerfile exists inside the
  context; every COPY/ADD source is in the context and survives the .dockerignore BuildKit uses
  (`<Dockerfile>.dockerignore`, docker-py's matcher); build args are declared, args without a
  default are given; every FROM resolves to an image pinned by digest, and a private ECR base
  was logged in to.
- `push REPO:TAG`: the tag was built and its registry logged in to; puts a manifest whose layer
  digest is the hash of the context files the image copies, so different content gives a
  different image in ECR.
Every call is appended as one JSON line to $DOCKER_STANDIN_LOG.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.dockerfile_stages import build_args, context_sources, instructions  # noqa: E402

PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
PRIVATE_ECR = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


def log() -> list[dict]:
    path = Path(os.environ["DOCKER_STANDIN_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def record(entry: dict) -> None:
    with open(os.environ["DOCKER_STANDIN_LOG"], "a") as out:
        out.write(json.dumps(entry) + "\n")


def fail(message: str) -> None:
    sys.exit(f"docker (rehearsal stand-in): {message}")


def login(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="docker login")
    parser.add_argument("--username", "-u", required=True)
    parser.add_argument("--password-stdin", action="store_true", required=True)
    parser.add_argument("registry")
    options = parser.parse_args(arguments)
    if not sys.stdin.read().strip():
        fail(f"login to {options.registry}: empty password on stdin")
    record({"command": "login", "registry": options.registry})
    print("Login Succeeded")


def logged_in(registry: str) -> bool:
    return any(e["command"] == "login" and e["registry"] == registry for e in log())


def included_files(context: Path, dockerfile: Path) -> set[str]:
    """What BuildKit sends: the context minus the Dockerfile's own .dockerignore."""
    from docker.utils.build import exclude_paths

    ignore = Path(f"{dockerfile}.dockerignore")
    if not ignore.is_file():
        ignore = context / ".dockerignore"
    patterns = [
        line.strip()
        for line in (ignore.read_text().splitlines() if ignore.is_file() else [])
        if line.strip() and not line.startswith("#")
    ]
    relative = str(dockerfile.resolve().relative_to(context.resolve()))
    return {
        path
        for path in exclude_paths(str(context), patterns, relative)
        if (context / path).is_file()
    }


def copied_files(source: str, files: set[str]) -> list[str]:
    prefix = source.strip("/").removeprefix("./")
    return sorted(
        f for f in files if fnmatch.fnmatch(f, prefix) or f.startswith(prefix.rstrip("/") + "/")
    )


def substitute(text: str, values: dict[str, str | None]) -> str:
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2)) or "", text
    )


def build(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="docker build")
    parser.add_argument("-f", "--file", required=True)
    parser.add_argument("--build-arg", action="append", default=[])
    parser.add_argument("-t", "--tag", action="append", required=True)
    parser.add_argument("context")
    options = parser.parse_args(arguments)
    if os.environ.get("DOCKER_BUILDKIT") == "0":
        fail("BuildKit is off: the Dockerfile's own .dockerignore would be ignored")
    context, dockerfile = Path(options.context), Path(options.file)
    if not dockerfile.is_file():
        fail(f"no Dockerfile {dockerfile}")
    if not dockerfile.resolve().is_relative_to(context.resolve()):
        fail(f"{dockerfile} is outside the build context {context}")
    text = dockerfile.read_text()

    declared = build_args(text)
    given = dict(arg.split("=", 1) for arg in options.build_arg)
    if unknown := sorted(set(given) - set(declared)):
        fail(f"build args the Dockerfile does not declare: {unknown}")
    missing = sorted(n for n, default in declared.items() if default is None and n not in given)
    if missing:
        fail(f"build args without a default not given: {missing}")
    values = {**declared, **given}
    stages = set()
    for keyword, argument in instructions(text):
        if keyword != "FROM":
            continue
        image, _, stage = substitute(argument, values).partition(" AS ")
        if image not in stages:
            if not PINNED.match(image):
                fail(f"FROM {argument!r} resolves to {image!r}, not pinned by digest")
            registry = image.split("/", 1)[0]
            if PRIVATE_ECR.match(registry) and not logged_in(registry):
                fail(f"pulling {image} needs a login to {registry} first")
        stages.add(stage.strip())

    files = included_files(context, dockerfile)
    content = hashlib.sha256()
    for source in context_sources(text):
        matched = copied_files(source, files)
        if not matched:
            fail(f"COPY {source}: not in the build context after .dockerignore")
        for name in matched:
            content.update(name.encode() + b"\0" + (context / name).read_bytes())
    content.update(json.dumps(given, sort_keys=True).encode())
    record(
        {
            "command": "build",
            "dockerfile": options.file,
            "tags": options.tag,
            "build_args": given,
            "layer": f"sha256:{content.hexdigest()}",
            "files": len(files),
        }
    )
    print(f"[stand-in] built {', '.join(options.tag)} from {len(files)} context files")


def push(arguments: list[str]) -> None:
    (reference,) = arguments
    built = [e for e in log() if e["command"] == "build" and reference in e["tags"]]
    if not built:
        fail(f"push {reference}: no such image built")
    repository_uri, _, tag = reference.rpartition(":")
    registry, _, repository = repository_uri.partition("/")
    ecr = PRIVATE_ECR.match(registry)
    if not ecr or not logged_in(registry):
        fail(f"push {reference}: not logged in to {registry}")
    import boto3

    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": 2,
            "digest": built[-1]["layer"],
        },
        "layers": [
            {
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                "size": 2,
                "digest": built[-1]["layer"],
            }
        ],
    }
    image = boto3.client("ecr", region_name=ecr.group(2)).put_image(
        registryId=ecr.group(1),
        repositoryName=repository,
        imageTag=tag,
        imageManifest=json.dumps(manifest),
        imageManifestMediaType=manifest["mediaType"],
    )["image"]
    record({"command": "push", "reference": reference, "digest": image["imageId"]["imageDigest"]})
    print(f"{tag}: digest: {image['imageId']['imageDigest']}")


def main() -> None:
    command, *arguments = sys.argv[1:]
    handlers = {"login": login, "build": build, "push": push}
    if command not in handlers:
        fail(f"`docker {command}` is not part of the rehearsal")
    handlers[command](arguments)


if __name__ == "__main__":
    main()
