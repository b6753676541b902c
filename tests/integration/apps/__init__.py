"""Small programs the integration tests run as separate processes."""
