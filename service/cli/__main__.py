"""``python3 -m service.cli``: the ``kernelsearch`` command."""

from service.cli import main

main()
