"""A test's pipelines as a defs folder, the product's one configuration shape.

Tests write their pipelines in the old single-file shape (short, one string) and move them with
the product's own ``migrate-config`` code, so the folder is what a user's migration writes.
"""

from __future__ import annotations

from pathlib import Path

from eos_pipeline.components.config import migrate_text


def write_defs(text: str, folder: Path) -> Path:
    """``text`` (a pipelines file) as defs.yaml folders under ``folder``; returns ``folder``."""
    migrate_text(text, f"{folder.name}.yaml", folder)
    return folder
