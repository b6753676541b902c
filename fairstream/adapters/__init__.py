"""Thin adapters between the pure core and Kafka: admin, producers, the Faust app."""
