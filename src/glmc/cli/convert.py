"""`glmc convert DIR OUT`: rewrite a model directory as safetensors (pytorch_model.bin in, save_pretrained's files
out), optionally in another dtype or sharded."""

import click

from glmc.cli.common import MODEL, check_out_path, max_shard_size_option


@click.command("convert")
@click.argument("model_dir", type=MODEL)
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--revision", default=None, help="With a hub id: the cached revision (a branch, tag or commit hash).")
@click.option("--dtype", "out_dtype", default="auto", show_default=True,
              type=click.Choice(["auto", "float32", "bfloat16", "float16", "float64"]),
              help="dtype of the written weights [auto: as stored].")
@max_shard_size_option
@click.option("--overwrite", is_flag=True, help="Replace OUT_DIR if it exists.")
def command(model_dir, out_dir, revision, out_dtype, max_shard_size, overwrite):
    """Rewrite MODEL_DIR (a directory, or a hub id in the local Hugging Face cache) into OUT_DIR as safetensors:
    exactly what save_pretrained writes, tensors that share storage (a tied head) once, and the directory's other
    files (tokenizer, glmc.json, …) copied. pytorch_model.bin files are read through torch.load(weights_only=True)
    only; whatever it refuses stays refused. The input is only read."""
    from glmc.api.checkpoints import convert
    from glmc.api.sources import resolve_model_path

    source = resolve_model_path(model_dir, revision)
    check_out_path(out_dir, "OUT_DIR", overwrite, directory=True, inputs=(source,))
    convert(source, out_dir, dtype=None if out_dtype == "auto" else out_dtype, max_shard_size=max_shard_size,
            overwrite=True)
    click.echo(f"wrote {out_dir}/ (safetensors)")
