"""Thin adapters between the pure core and Kafka: client defaults, admin, the policy store."""
