"""What CodeBuild will see: the source zip CDK stages for the build projects, and every path the
buildspecs and Dockerfiles name, looked up in that zip's directory (exactly what is uploaded).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cdk_templates import STATEFUL, synthesize
from tests.support.codebuild_view import (
    build_projects,
    buildspec_commands,
    buildspec_variables,
    load_buildspec,
    module_exists,
    named_paths,
    staged_source,
)
from tests.support.dockerfile_stages import context_sources

pytestmark = pytest.mark.rehearsal


@pytest.fixture(scope="module")
def assembly(tmp_path_factory) -> Path:
    return synthesize(tmp_path_factory.mktemp("source"))  # no release: the stateful stack


@pytest.fixture(scope="module")
def projects(assembly):
    found = build_projects(assembly, STATEFUL)
    assert {p.buildspec for p in found} == {
        "model_packaging/buildspec.yml",
        "container/buildspec.yml",
    }
    return found


def test_all_projects_read_one_staged_source(assembly, projects):
    assert len({staged_source(assembly, STATEFUL, p) for p in projects}) == 1


def test_the_staged_source_holds_the_build_directories_and_nothing_else(assembly, projects):
    source = staged_source(assembly, STATEFUL, projects[0])
    assert sorted(p.name for p in source.iterdir()) == [
        "container",
        "model_manifest",
        "model_packaging",
    ]
    files = [p.relative_to(source) for p in source.rglob("*")]
    assert not [f for f in files if any(part.startswith(".") for part in f.parts)]
    assert not [f for f in files if "__pycache__" in f.parts or f.suffix == ".pyc"]
    # The code itself, not only directories.
    assert (source / "container/decision_adapter/__main__.py").is_file()
    assert (source / "model_packaging/cli.py").is_file()
    assert (source / "model_manifest/manifest.py").is_file()


def test_every_path_a_buildspec_names_is_in_the_staged_source(assembly, projects):
    for project in projects:
        source = staged_source(assembly, STATEFUL, project)
        assert (source / project.buildspec).is_file(), project.buildspec
        buildspec = load_buildspec(source, project)
        named = named_paths(buildspec_commands(buildspec), buildspec_variables(buildspec, project))
        assert named.requirements or named.modules or named.dockerfiles, project.buildspec
        for requirements in named.requirements:
            assert (source / requirements).is_file(), (project.buildspec, requirements)
        for module in named.modules:
            assert module_exists(source, module), (project.buildspec, module)
        for dockerfile in named.dockerfiles:
            assert (source / dockerfile).is_file(), (project.buildspec, dockerfile)


def test_every_dockerfile_copies_only_what_the_staged_source_holds(assembly, projects):
    dockerfiles = set()
    for project in projects:
        source = staged_source(assembly, STATEFUL, project)
        buildspec = load_buildspec(source, project)
        variables = buildspec_variables(buildspec, project)
        for dockerfile in named_paths(buildspec_commands(buildspec), variables).dockerfiles:
            dockerfiles.add(dockerfile)
            # The build context is the source root (`docker build ... .`); BuildKit reads the
            # ignore file next to the Dockerfile.
            assert (source / f"{dockerfile}.dockerignore").is_file(), dockerfile
            copied = context_sources((source / dockerfile).read_text())
            assert copied, dockerfile
            for path in copied:
                assert (source / path).exists(), (dockerfile, path)
    assert dockerfiles == {"container/Dockerfile", "container/Dockerfile.gpu"}


def test_the_dockerfile_reader_skips_copies_from_other_stages():
    text = (
        "FROM a AS builder\n# comment\nCOPY --chown=1:1 x/y \\\n  z/ /dst/\n"
        'FROM b\nCOPY --from=builder /opt/venv /opt/venv\nADD ["w", "/w"]\n'
    )
    assert context_sources(text) == ["x/y", "z/", "w"]
