"""Durable per-tenant buffers: how buffered records are keyed and encoded in the state store."""
