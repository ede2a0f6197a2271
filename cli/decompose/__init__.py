"""``cli.decompose``: break a task prompt into subtasks, prompts and constraints with a model.

``app`` is the ``m decompose`` command group (its one command: ``run``).
"""

import typer

from .decompose import run

app = typer.Typer(
    name="decompose",
    no_args_is_help=True,
    help="Decompose task prompts into subtasks and write them as a mellea program.",
)
app.command(name="run", no_args_is_help=True)(run)
