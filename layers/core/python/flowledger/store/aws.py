"""boto3 clients for the configured account or the embedded local endpoint.

Clients are made on first use and reused: a warm Lambda pays for each one once, and a function
that never touches S3 never builds an S3 client.
"""

from __future__ import annotations

from functools import cache, cached_property
from typing import Any

from flowledger.config import Settings
from flowledger.store.tables import physical_bucket_name, physical_table_name


@cache
def _shared_loader() -> Any:
    """One botocore data loader for the process, so each service's model (a JSON file of up to a few MB)
    is parsed once however many sessions the process makes. Every ``AwsClients`` needs a session of its
    own (the embedded store's credentials differ from the role's), and a new session's own loader would
    parse the models again: about 50 ms a service, paid by the dev server's workers, the CLI and every
    test for each set of clients."""
    from botocore.loaders import create_loader

    return create_loader()


class AwsClients:
    """The AWS clients and physical resource names one process uses."""

    def __init__(self, settings: Settings, static_credentials: tuple[str, str] | None = None) -> None:
        """``static_credentials`` (key id, secret) are for the embedded endpoint; in AWS the
        function's role supplies credentials through the standard chain."""
        self._settings = settings
        self._static_credentials = static_credentials

    def _client(self, service: str) -> Any:
        # botocore is imported on first use: a function that never calls AWS never loads it (~120 ms).
        # Plain botocore clients (paginators and waiters included): boto3's session would add its own
        # resource path to the shared loader at every session, and only its resources need it.
        import botocore.session
        from botocore.config import Config

        key_id, secret = self._static_credentials or (None, None)
        session = botocore.session.get_session()
        session.register_component("data_loader", _shared_loader())
        if service == "dynamodb":
            from flowledger.store.dynamodb_parsing import DynamoDBParserFactory

            session.register_component("response_parser_factory", DynamoDBParserFactory())
        return session.create_client(
            service,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            region_name=self._settings.aws_region,
            endpoint_url=self._settings.aws_endpoint_url,
            # Standard retry mode backs off on throttling; few attempts, since callers hold a request open.
            config=Config(
                retries={"max_attempts": 4, "mode": "standard"},
                connect_timeout=3,
                read_timeout=10,
                # SigV4 for presigned URLs too: S3 refuses SigV2 on buckets made since June 2020.
                signature_version="s3v4" if service == "s3" else None,
            ),
        )

    @cached_property
    def dynamodb(self) -> Any:
        return self._client("dynamodb")

    @cached_property
    def s3(self) -> Any:
        return self._client("s3")

    @cached_property
    def kms(self) -> Any:
        return self._client("kms")

    @cached_property
    def logs(self) -> Any:
        return self._client("logs")

    def table_name(self, logical: str) -> str:
        return physical_table_name(self._settings.resource_prefix, logical)

    def bucket_name(self, logical: str) -> str:
        return physical_bucket_name(self._settings.resource_prefix, logical, self._settings.bucket_suffix)
