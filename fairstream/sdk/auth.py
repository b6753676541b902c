"""Refused credentials in the SDK's clients: librdkafka settings whose ``error_cb`` tells an
``AuthWatch`` (``fairstream.adapters.admin``) first, then calls the settings' own.

librdkafka retries a refused login forever; with the watch in every client's ``error_cb``,
the producers and the workers raise ``KafkaAuthenticationError`` as soon as it is seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from fairstream.adapters.admin import AuthWatch

__all__ = ["watched"]


def watched(auth: AuthWatch, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with an ``error_cb`` that feeds ``auth``, then the one ``config`` had."""
    own = config.get("error_cb")

    def on_error(err: KafkaError) -> None:
        auth(err)
        if own is not None:
            own(err)

    return {**config, "error_cb": on_error}
