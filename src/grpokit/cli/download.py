"""Fetch a config's model onto the login node (ModelScope by default, or Hugging Face).

    python launch/download.py                      # the default model (configs/model/qwen3_5_0_8b.yaml)
    python launch/download.py model=qwen3_5_0_8b --source hf
    python launch/download.py model=tiny           # builds the random smoke model instead

Resumable: both hubs' snapshot downloads skip files already complete. A model counts as present when
its folder has ``config.json`` and every weight file its index names; then nothing is fetched.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grpokit.config.compose import compose_kit


def is_complete(path: Path) -> bool:
    """``config.json`` plus the weights (``model.safetensors`` or every shard of the index)."""
    if not (path / "config.json").is_file():
        return False
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text())["weight_map"].values())
        return all((path / s).is_file() for s in shards)
    return any(path.glob("*.safetensors")) or any(path.glob("*.bin"))


def fetch(hub_id: str, out: Path, source: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if source == "modelscope":
        from modelscope import snapshot_download

        snapshot_download(hub_id, local_dir=str(out))
    elif source == "hf":
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id=hub_id, local_dir=str(out))
    else:
        raise ValueError(f"unknown source {source!r}: modelscope or hf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="kit overrides, e.g. model=qwen3_5_0_8b")
    parser.add_argument("--source", choices=["modelscope", "hf"], default=None, help="default: the model's own")
    args = parser.parse_args(argv)
    model = compose_kit(args.overrides).model
    out = Path(str(model.path))
    if is_complete(out):
        print(f"{model.name}: already complete in {out}")
        return 0
    if model.get("source") == "build":
        from grpokit.models import build_model

        build_model(out, like=str(model.get("like", "tiny")))
        print(f"{model.name}: built in {out}")
        return 0
    source = args.source or str(model.get("source", "modelscope"))
    try:
        fetch(str(model.hub_id), out, source)
    except ImportError as exc:
        print(
            f"{exc.name} is not installed: pip install -e '.[hub]' (or make run MODEL=<model>, which installs it), "
            f"or use --source {'hf' if source == 'modelscope' else 'modelscope'}",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:
        print(
            f"could not fetch {model.hub_id} from {source}: {type(exc).__name__}: {exc}\n"
            f"  retry (downloads resume), try --source {'hf' if source == 'modelscope' else 'modelscope'}, "
            f"or copy the model into {out}",
            file=sys.stderr,
        )
        return 1
    if not is_complete(out):
        print(f"{out} is still incomplete after the download (no config.json or missing weights)", file=sys.stderr)
        return 1
    print(f"{model.name}: downloaded to {out}")
    return 0


def entry(argv: list[str] | None = None) -> int:
    """``grpokit download ...`` / ``python launch/download.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
