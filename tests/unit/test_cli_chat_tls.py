"""`flowledger chat` skips the CA bundle only where no TLS happens: an https server is verified as ever."""

from __future__ import annotations

import ssl

from flowledger.cli.chat import tls_context


def test_an_https_server_gets_the_usual_certificate_checks() -> None:
    assert tls_context("https://flowledger.example.org") is True


def test_an_http_server_gets_a_context_that_would_refuse_any_certificate() -> None:
    context = tls_context("http://127.0.0.1:8000")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs() == []  # nothing trusted: a TLS hop (an https proxy) fails closed
