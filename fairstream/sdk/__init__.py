"""The SDK: ``Producer`` (``fairstream.sdk.producer``) submits requests to the ingest topic;
``Worker`` (``fairstream.sdk.worker``) consumes the egress topic and calls a handler for each.
Users import them from ``fairstream``.
"""
