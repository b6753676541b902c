"""The scheduler service: the Faust app, its web endpoints and its command."""
