"""Regions and partitions: the DLC registry of each region, and what happens elsewhere."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.region_info import Fact, FactName, RegionInfo
from pydantic import ValidationError

from stacks.config import DEFAULT_DLC_CUDA_DIGEST, AppConfig
from stacks.constructs.artifacts import ContainerImage
from stacks.dlc_registry import DLC_ACCOUNTS, RULE_ID, UnsupportedRegion, registry_domain
from tests.support.cdk_templates import STATEFUL, cdk_json_context, run_app, synthesize


def stateful_template(assembly) -> dict:
    return json.loads((assembly / f"{STATEFUL}.template.json").read_text())


def build_variables(template: dict, dockerfile: str) -> dict:
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::CodeBuild::Project":
            continue
        variables = {
            v["Name"]: v["Value"]
            for v in resource["Properties"]["Environment"]["EnvironmentVariables"]
        }
        if variables.get("DOCKERFILE") == dockerfile:
            return variables
    raise AssertionError(dockerfile)


@pytest.fixture(scope="module")
def agnostic(tmp_path_factory) -> dict:
    return stateful_template(synthesize(tmp_path_factory.mktemp("agnostic")))


def test_the_regions_the_issue_found_missing_are_served():
    for region in (
        "ap-northeast-3",
        "il-central-1",
        "ca-west-1",
        "af-south-1",
        "ap-southeast-5",
        "ap-southeast-7",
        "mx-central-1",
    ):
        assert len(DLC_ACCOUNTS[region]) == 12


def test_the_table_agrees_with_cdks_regional_facts_where_cdk_knows_one():
    """CDK's fact is an older copy of the same list: no region it knows may differ or be
    missing here, unless its partition is one the DLC does not serve (GovCloud, ISO, EUSC)."""
    for region in RegionInfo.regions:
        known = Fact.find(region.name, FactName.DLC_REPOSITORY_ACCOUNT)
        partition = Fact.find(region.name, FactName.PARTITION)
        if known and partition in ("aws", "aws-cn"):
            assert DLC_ACCOUNTS[region.name] == known, region.name
    # Every region is one CDK knows, except those newer than aws-cdk-lib's list.
    assert set(DLC_ACCOUNTS) - {r.name for r in RegionInfo.regions} == {"me-west-1"}


def test_me_west_1_pulls_from_its_own_registry_account():
    """From the DLC's region list; aws-cdk-lib 2.275's regional facts do not know the region."""
    assert DLC_ACCOUNTS["me-west-1"] == "124382933778"
    assert registry_domain("me-west-1") == "amazonaws.com"


def test_registries_in_china_are_under_the_china_domain():
    assert registry_domain("cn-north-1") == registry_domain("cn-northwest-1") == "amazonaws.com.cn"
    assert registry_domain("eu-west-1") == "amazonaws.com"


def test_an_agnostic_template_maps_every_region_and_refuses_others_before_deploying(agnostic):
    mapping = agnostic["Mappings"]["DlcRepositoryAccountMap"]
    assert {region: entry["account"] for region, entry in mapping.items()} == DLC_ACCOUNTS
    (assertion,) = agnostic["Rules"][RULE_ID]["Assertions"]
    regions, region = assertion["Assert"]["Fn::Contains"]
    assert region == {"Ref": "AWS::Region"} and sorted(regions) == sorted(DLC_ACCOUNTS)
    assert (
        assertion["AssertDescription"]
        == (  # what CloudFormation shows when it stops
            "This region has no llama.cpp Deep Learning Container registry; deploy "
            "to one listed in stacks/dlc_registry.py."
        )
    )
    # The image URI takes the account from the map and the domain from the partition.
    image = build_variables(agnostic, "container/Dockerfile.gpu")["BASE_IMAGE"]
    parts = image["Fn::Join"][1]
    account = {"Fn::FindInMap": ["DlcRepositoryAccountMap", {"Ref": "AWS::Region"}, "account"]}
    assert account in parts
    assert {"Ref": "AWS::URLSuffix"} in parts


@pytest.mark.parametrize(
    "region, registry",
    [
        ("ap-northeast-3", "364406365360.dkr.ecr.ap-northeast-3.amazonaws.com"),
        ("cn-north-1", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn"),
    ],
)
def test_a_known_region_gets_the_literal_registry_of_its_partition(tmp_path, region, registry):
    template = stateful_template(synthesize(tmp_path, region=region))
    variables = build_variables(template, "container/Dockerfile.gpu")
    assert variables["BASE_IMAGE"] == f"{registry}/llama-cpp@{DEFAULT_DLC_CUDA_DIGEST}"
    assert "DlcRepositoryAccountMap" not in template.get("Mappings", {})
    assert RULE_ID not in template.get("Rules", {})


@pytest.mark.parametrize("region", ["us-gov-west-1", "eusc-de-east-1", "xx-nowhere-1"])
def test_an_unsupported_known_region_fails_synthesis_in_one_line(region):
    with pytest.raises(ValidationError) as raised:
        AppConfig.from_context({**cdk_json_context(), "region": region})
    assert f"region {region!r} has no llama.cpp Deep Learning Container registry" in str(
        raised.value
    )
    # The construct refuses it too, for stacks made with an env outside the config.
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(region=region))
    with pytest.raises(UnsupportedRegion, match="deploy to one of: af-south-1, ap-east-1") as by:
        ContainerImage.from_dlc(stack, repository_name="llama-cpp", digest=DEFAULT_DLC_CUDA_DIGEST)
    assert str(by.value).startswith(f"region {region!r} has no")


def test_the_app_refuses_an_unsupported_region_before_writing_templates(tmp_path):
    result = run_app(tmp_path, region="us-gov-east-1")
    assert result.returncode != 0
    assert "region 'us-gov-east-1' has no llama.cpp Deep Learning Container registry" in (
        result.stderr
    )
    assert not list(tmp_path.glob("*.template.json"))
