"""``python -m fairstream_dev``: the same as the ``fairstream-dev`` command."""

from fairstream_dev.cli import main

main()
