"""Where the AWS Deep Learning Containers are published: a registry account per region.

From the DLC project's own list (aws/deep-learning-containers, docs/reference/
region_availability.md, "Deep Learning Containers", at commit e0ecedea). CDK's regional fact
(FactName.DLC_REPOSITORY_ACCOUNT) lacks several of these regions (ap-northeast-3, il-central-1,
ca-west-1, af-south-1, ...), so the project keeps its own table and checks it in a test.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnMapping, CfnRule, CfnRuleAssertion, Fn, Stack, Token
from constructs import IConstruct

DLC_ACCOUNTS = {
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-south-2": "772153158452",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "eu-central-1": "763104351884",
    "eu-central-2": "380420809688",
    "eu-north-1": "763104351884",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "me-west-1": "124382933778",
    "mx-central-1": "637423239942",
    "sa-east-1": "763104351884",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
}
MAPPING_ID = "DlcRepositoryAccountMap"
RULE_ID = "DlcRegionIsSupported"


class UnsupportedRegion(ValueError):
    def __init__(self, region: str) -> None:
        super().__init__(
            f"region {region!r} has no llama.cpp Deep Learning Container registry; "
            f"deploy to one of: {', '.join(sorted(DLC_ACCOUNTS))}"
        )


def registry_domain(region: str) -> str:
    """ECR's domain in the region's partition: China's registries are under amazonaws.com.cn."""
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


def dlc_registry(scope: IConstruct) -> tuple[str, str]:
    """(account, domain) of the DLC registry in the stack's region.

    A stack with a known region gets literals, and an unsupported region fails synthesis. An
    environment-agnostic stack gets a mapping, plus a template rule that stops the deployment
    with one clear message before anything is created in a region without the DLC.
    """
    stack = Stack.of(scope)
    if not Token.is_unresolved(stack.region):
        if stack.region not in DLC_ACCOUNTS:
            raise UnsupportedRegion(stack.region)
        return DLC_ACCOUNTS[stack.region], registry_domain(stack.region)
    mapping = stack.node.try_find_child(MAPPING_ID)
    if mapping is None:
        mapping = CfnMapping(
            stack,
            MAPPING_ID,
            mapping={region: {"account": account} for region, account in DLC_ACCOUNTS.items()},
        )
        CfnRule(
            stack,
            RULE_ID,
            assertions=[
                CfnRuleAssertion(
                    assert_=Fn.condition_contains(sorted(DLC_ACCOUNTS), Aws.REGION),
                    assert_description=(
                        "This region has no llama.cpp Deep Learning Container registry; deploy "
                        "to one listed in stacks/dlc_registry.py."
                    ),
                )
            ],
        )
    assert isinstance(mapping, CfnMapping)
    return mapping.find_in_map(Aws.REGION, "account"), Aws.URL_SUFFIX
