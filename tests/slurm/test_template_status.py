"""The sbatch templates end with commbench's exit status; a status only srun can give (a task
killed, or dead before commbench answered) becomes 1, a failed run, never an unknown code."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("template", ["multi-node.sbatch", "single-node.sbatch"])
@pytest.mark.parametrize("srun_status,job_status", [(0, 0), (1, 1), (2, 2), (130, 130), (14, 1), (137, 1)])
def test_job_status_is_one_of_commbenchs(template, srun_status, job_status):
    text = (ROOT / "slurm" / template).read_text()
    block = re.search(r'\ncase "\$status" in\n.*?\nesac\n', text, re.S)
    assert block, "the template maps srun's status"
    script = f"status={srun_status}\n{block.group(0)}\nexit \"$status\"\n"
    assert subprocess.run(["bash", "-c", script], capture_output=True).returncode == job_status
