"""``m alora``: train an adapter that checks a requirement, upload it, write its README.

``train`` runs here (peft on the local CPU or GPU, the base model from local files);
``upload`` and ``add-readme`` push to the Hugging Face Hub and need a token and
network access to it. A missing package, model, file or token ends the command with
exit status 1 and one line saying what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

alora_app = typer.Typer(
    name="alora",
    no_args_is_help=True,
    help="Train or upload aLoRA / LoRA adapters that check requirements.",
)


def _or_exit(action: Callable[[], Any]) -> Any:
    """Run ``action``; a setup or upload error becomes one line on stderr and exit 1."""
    from cli.alora.train import TrainingSetupError
    from cli.alora.upload import UploadError

    try:
        return action()
    except (TrainingSetupError, UploadError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@alora_app.command("train")
def alora_train(
    datafile: Annotated[str, typer.Argument(help="JSONL file of item/label pairs.")],
    basemodel: Annotated[
        str,
        typer.Option(
            help="Base model: a directory, a .gguf file, 'default' (the bundled model) or a cached hub id."
        ),
    ],
    outfile: Annotated[str, typer.Option(help="Directory to save the adapter in.")],
    promptfile: Annotated[
        str | None, typer.Option(help="JSON file whose invocation_prompt starts the check.")
    ] = None,
    adapter: Annotated[str, typer.Option(help="Adapter type: alora or lora.")] = "alora",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or mps.")] = "auto",
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 6,
    learning_rate: Annotated[float, typer.Option(help="Learning rate.")] = 6e-6,
    batch_size: Annotated[int, typer.Option(help="Examples per batch.")] = 2,
    max_length: Annotated[int, typer.Option(help="Longest example, in tokens.")] = 1024,
    grad_accum: Annotated[int, typer.Option(help="Batches per optimizer step.")] = 4,
) -> None:
    """Train an aLoRA or LoRA adapter on labelled examples; saves the best by validation loss."""
    from cli.alora.train import train_model

    result = _or_exit(
        lambda: train_model(
            dataset_path=datafile,
            base_model=basemodel,
            output_file=outfile,
            prompt_file=promptfile,
            adapter=adapter,
            device=device,
            epochs=epochs,
            learning_rate=learning_rate,
            batch_size=batch_size,
            max_length=max_length,
            grad_accum=grad_accum,
        )
    )
    typer.echo(
        f"adapter saved to {result['output']} (validation loss {result['best_eval_loss']:.4f})"
    )


@alora_app.command("upload")
def alora_upload(
    weight_path: Annotated[str, typer.Argument(help="Directory of the trained adapter.")],
    name: Annotated[
        str, typer.Option(help="Repository to upload to, e.g. acme/carbchecker-alora.")
    ],
    intrinsic: Annotated[
        bool, typer.Option(help="Upload in the intrinsic layout (needs --io-yaml).")
    ] = False,
    io_yaml: Annotated[
        str | None, typer.Option(help="io.yaml configuring the intrinsic's input and output.")
    ] = None,
) -> None:
    """Upload a trained adapter to the Hugging Face Hub."""
    from cli.alora.upload import adapter_info, upload_intrinsic, upload_model

    if intrinsic and not io_yaml:
        raise typer.BadParameter("--intrinsic needs --io-yaml", param_hint="--io-yaml")
    if intrinsic:
        base, kind = _or_exit(lambda: adapter_info(weight_path))
        url = _or_exit(lambda: upload_intrinsic(weight_path, name, base, kind, io_yaml or ""))
    else:
        url = _or_exit(lambda: upload_model(weight_path, name))
    typer.echo(f"uploaded to {url}")


@alora_app.command("add-readme")
def alora_add_readme(
    datafile: Annotated[str, typer.Argument(help="JSONL file of item/label pairs.")],
    basemodel: Annotated[str, typer.Option(help="Base model the adapter was trained on.")],
    name: Annotated[str, typer.Option(help="Repository to upload the README to.")],
    promptfile: Annotated[
        str | None, typer.Option(help="JSON file whose invocation_prompt starts the check.")
    ] = None,
    hints: Annotated[
        str | None, typer.Option(help="File of extra hints for the README's writer.")
    ] = None,
    io_yaml: Annotated[
        str | None, typer.Option(help="io.yaml of the intrinsic (accepted, as upstream).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Upload without asking.")] = False,
) -> None:
    """Write the adapter's README with the session's model, show it, and upload it when confirmed."""
    import tempfile
    from pathlib import Path

    from cli.alora.readme_generator import generate_readme
    from cli.alora.upload import UploadError, hub_api, on_hub

    del io_yaml
    hint_text = Path(hints).read_text() if hints else None
    with tempfile.TemporaryDirectory() as tmp:
        readme = str(Path(tmp) / "README.md")
        generate_readme(datafile, basemodel, promptfile, readme, name, hint_text)
        typer.echo(Path(readme).read_text())
        if not yes and not typer.confirm(f"Upload this README to {name}?"):
            typer.echo("not uploaded")
            raise typer.Exit(1)

        def upload() -> None:
            api, _ = hub_api()
            on_hub(
                f"upload the README to {name}",
                lambda: api.upload_file(
                    path_or_fileobj=readme, path_in_repo="README.md", repo_id=name
                ),
            )

        try:
            upload()
        except UploadError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"README uploaded to {name}")
