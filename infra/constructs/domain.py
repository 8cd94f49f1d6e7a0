"""Custom names for the console and the API (``flowledger:domain``, off by default), TLS 1.2 at least.

``cdk deploy -c flowledger:domain='{...}'`` (a JSON object):
``{"console": "console.example.org", "consoleCertificateArn": "arn:aws:acm:us-east-1:ACCOUNT:certificate/ID",
"api": "api.example.org", "apiCertificateArn": "arn:aws:acm:REGION:ACCOUNT:certificate/ID",
"hostedZoneId": "Z...", "hostedZoneName": "example.org"}``.

``console`` and ``api`` are each optional, each with its certificate, issued (or imported) in ACM
beforehand: CloudFront takes certificates from us-east-1 only, a regional API from its own region.
The console's name goes on its distribution (``Console``, TLSv1.2_2021); the API gets a REGIONAL
custom domain (TLS_1_2) whose ``v1`` path maps to the ``v1`` stage, so its addresses keep the shape of
the execute-api ones (``https://api.example.org/v1/api/chat``). With the hosted zone, alias A and AAAA
records point both names at their endpoints; without it, the operator adds them (or CNAMEs) elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import CfnOutput, Stack, Token
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_route53_targets as targets
from constructs import Construct, Node

from infra.constructs.context import json_context

DOMAIN_CONTEXT = "flowledger:domain"
CLOUDFRONT_CERTIFICATE_REGION = "us-east-1"  # CloudFront's certificates come from ACM in this region only
API_BASE_PATH = "v1"  # the stage's name: a custom address is the execute-api one with another host
_KEYS = ("console", "consoleCertificateArn", "api", "apiCertificateArn", "hostedZoneId", "hostedZoneName")
_HOST = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]$")
_CERTIFICATE_ARN = re.compile(r"^arn:aws[a-z-]*:acm:([a-z0-9-]+):\d{12}:certificate/[\w-]+$")
_ZONE_ID = re.compile(r"^Z[A-Z0-9]{1,31}$")


@dataclass(frozen=True)
class DomainSettings:
    """The console's and the API's names and certificates, and the Route 53 zone to publish them in."""

    console: str | None = None
    console_certificate_arn: str | None = None
    api: str | None = None
    api_certificate_arn: str | None = None
    hosted_zone_id: str | None = None
    hosted_zone_name: str | None = None

    @classmethod
    def from_context(cls, node: Node) -> DomainSettings | None:
        """The settings from ``flowledger:domain``, ``None`` when unset; a bad value fails the synth naming it."""
        value = json_context(node, DOMAIN_CONTEXT)
        if value is None:
            return None
        if not isinstance(value, dict) or not set(value) <= set(_KEYS):
            raise ValueError(f"{DOMAIN_CONTEXT} must be an object with only {', '.join(_KEYS)}")
        for key in _KEYS:
            if key in value and not isinstance(value[key], str):
                raise ValueError(f"{DOMAIN_CONTEXT}: {key} must be a string")
        settings = cls(*(value.get(key) or None for key in _KEYS))
        settings._check()
        return settings

    def _check(self) -> None:
        names = {"console": self.console, "api": self.api}
        certificates = {"console": self.console_certificate_arn, "api": self.api_certificate_arn}
        if not any(names.values()):
            raise ValueError(f"{DOMAIN_CONTEXT} names neither console nor api")
        for part, name in names.items():
            if bool(name) != bool(certificates[part]):
                raise ValueError(f"{DOMAIN_CONTEXT}: {part} and {part}CertificateArn go together")
            if name and not _HOST.match(name):
                raise ValueError(
                    f"{DOMAIN_CONTEXT}: {part} must be a host name such as {part}.example.org, not {name!r}"
                )
            arn = certificates[part]
            if arn and not _CERTIFICATE_ARN.match(arn):
                raise ValueError(
                    f"{DOMAIN_CONTEXT}: {part}CertificateArn must be an ACM certificate ARN "
                    f"(arn:aws:acm:REGION:ACCOUNT:certificate/ID), not {arn!r}"
                )
        if self.console_certificate_arn and _region(self.console_certificate_arn) != CLOUDFRONT_CERTIFICATE_REGION:
            raise ValueError(
                f"{DOMAIN_CONTEXT}: consoleCertificateArn must be a certificate in {CLOUDFRONT_CERTIFICATE_REGION} "
                f"(CloudFront takes no other), not in {_region(self.console_certificate_arn)}"
            )
        if bool(self.hosted_zone_id) != bool(self.hosted_zone_name):
            raise ValueError(f"{DOMAIN_CONTEXT}: hostedZoneId and hostedZoneName go together")
        if self.hosted_zone_id and not _ZONE_ID.match(self.hosted_zone_id):
            raise ValueError(
                f"{DOMAIN_CONTEXT}: hostedZoneId must be a Route 53 zone id (Z...), not {self.hosted_zone_id!r}"
            )
        zone = self.hosted_zone_name
        if zone is not None:
            if not _HOST.match(zone):
                raise ValueError(f"{DOMAIN_CONTEXT}: hostedZoneName must be a domain such as example.org, not {zone!r}")
            for part, name in names.items():
                if name and name != zone and not name.endswith(f".{zone}"):
                    raise ValueError(f"{DOMAIN_CONTEXT}: {part} {name!r} is not in the hosted zone {zone!r}")

    def check_region(self, region: str) -> None:
        """A regional API's certificate must be in its region (checked when the stack's region is known)."""
        arn = self.api_certificate_arn
        if arn and not Token.is_unresolved(region) and _region(arn) != region:
            raise ValueError(
                f"{DOMAIN_CONTEXT}: apiCertificateArn must be a certificate in the stack's region {region}, "
                f"not in {_region(arn)}"
            )

    @property
    def console_origin(self) -> str | None:
        """``https://`` and the console's name: the browser origin the API's CORS must allow."""
        return f"https://{self.console}" if self.console else None

    @property
    def api_origin(self) -> str | None:
        """``https://`` and the API's name: what the console's CSP must let it connect to."""
        return f"https://{self.api}" if self.api else None

    @property
    def api_url(self) -> str | None:
        """The API's base address on its custom name, as ``RestApi.url`` is on execute-api."""
        return f"https://{self.api}/{API_BASE_PATH}/" if self.api else None


def _region(certificate_arn: str) -> str:
    return certificate_arn.split(":")[3]


class Domain(Construct):
    """The API's custom domain and mapping, the outputs naming both, and the alias records when a zone is given.

    The console's name and certificate are the distribution's own properties (``Console``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DomainSettings,
        rest_api: apigw.RestApi,
        distribution: cloudfront.IDistribution,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        settings.check_region(stack.region)
        zone = (
            route53.HostedZone.from_hosted_zone_attributes(
                self, "Zone", hosted_zone_id=settings.hosted_zone_id, zone_name=settings.hosted_zone_name
            )
            if settings.hosted_zone_id and settings.hosted_zone_name
            else None
        )
        if settings.console:
            CfnOutput(stack, "ConsoleCustomUrl", value=f"{settings.console_origin}/console/")
            if zone:
                self._aliases("Console", zone, settings.console, targets.CloudFrontTarget(distribution))
        if settings.api and settings.api_certificate_arn:
            self.api_domain = apigw.DomainName(
                self,
                "ApiDomain",
                domain_name=settings.api,
                certificate=acm.Certificate.from_certificate_arn(self, "ApiCertificate", settings.api_certificate_arn),
                endpoint_type=apigw.EndpointType.REGIONAL,
                security_policy=apigw.SecurityPolicy.TLS_1_2,
            )
            # IPv6 as well as IPv4, as the distribution answers: the AAAA record then resolves.
            default = self.api_domain.node.default_child
            assert isinstance(default, apigw.CfnDomainName)
            default.add_property_override("EndpointConfiguration.IpAddressType", "dualstack")
            apigw.BasePathMapping(
                self,
                "ApiMapping",
                domain_name=self.api_domain,
                rest_api=rest_api,
                base_path=API_BASE_PATH,
                stage=rest_api.deployment_stage,
            )
            CfnOutput(stack, "ApiCustomUrl", value=str(settings.api_url))
            if zone:
                self._aliases("Api", zone, settings.api, targets.ApiGatewayDomain(self.api_domain))

    def _aliases(self, name: str, zone: route53.IHostedZone, host: str, target: route53.IAliasRecordTarget) -> None:
        alias = route53.RecordTarget.from_alias(target)
        route53.ARecord(self, f"{name}A", zone=zone, record_name=host, target=alias)
        route53.AaaaRecord(self, f"{name}Aaaa", zone=zone, record_name=host, target=alias)
