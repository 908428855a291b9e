"""The paper's evaluation files in the shared data folder (spec 10), found next to the repository; tests that read
them skip cleanly when the folder is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
EVAL_FILES = {"aime-2024": 30, "aime25": 30, "amc-23": 40}  # problems per file, 32 copies each
needs_data = pytest.mark.skipif(not (DATA / "aime25.parquet").is_file(), reason="shared eval data not present")
