"""Allows ``python -m fairstream``."""

from fairstream.cli import main

main()
