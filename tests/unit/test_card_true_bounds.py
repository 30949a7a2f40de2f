"""Card-true bounds: the HBM and tensor-core peaks a bound uses are the card's own (an H100 80 GB's
3,352 GB/s and its boost clock, an H200's 4,917 GB/s), never a figure below what the card can do."""
from __future__ import annotations

import pytest

from commbench.analysis.bound_copy import copy_bound
from commbench.analysis.bound_limits import gpu_hbm_gbps, hbm
from commbench.sysinfo import links
from commbench.sysinfo.card_peaks import CardPeaks
from commbench.sysinfo.link_rates import hbm_from_clock
from tests.unit.links_fixtures import FIXTURES, h100_links


def test_hbm_from_each_cards_clock_and_bus():
    assert hbm_from_clock(2619, 5120) == pytest.approx(3352.3, abs=0.1)   # H100 80GB HBM3
    assert hbm_from_clock(3201, 6144) == pytest.approx(4916.7, abs=0.1)   # H200


def test_tensor_peak_at_the_highest_sm_clock_is_above_the_datasheet():
    h100 = CardPeaks(hbm_gbps=3352.3, sm_count=132, sm_clock_mhz=1980.0, compute_capability=(9, 0))
    assert h100.tensor_tflops("bfloat16") == pytest.approx(1070.5, abs=0.1)
    assert h100.tensor_tflops("float8_e4m3") == pytest.approx(2141.0, abs=0.1)
    assert h100.tensor_tflops("bfloat16") > 989.0   # the datasheet's figure is at 1,830 MHz
    assert CardPeaks(None, 132, 1980.0, (12, 0)).tensor_tflops() is None   # not in the table: no guess


def test_smi_fallback_takes_the_clock_over_a_lower_datasheet_figure():
    machine = links.collect({}, smi_text=(FIXTURES / "h200-pcie-smi-q.txt").read_text(), sys_root="/nonexistent")
    gpu = machine["gpus"][0]
    assert (gpu["hbm_gbps"], gpu["hbm_source"]) == (4800.0, "datasheet")   # what the probe recorded
    assert gpu_hbm_gbps(gpu) == pytest.approx(4916.7, abs=0.1)
    assert hbm(machine).gbps == pytest.approx(4916.7, abs=0.1)


def test_h100_copy_bound_is_its_own_hbm(tmp_path):
    machine = h100_links(tmp_path)
    limit, _note = copy_bound({"family": "copy", "op": "d2d", "gpu": 0}, machine)
    assert limit.gbps == pytest.approx(hbm(machine).gbps / 2)
    assert hbm(machine).gbps < 3400   # an H100's HBM3, not an H200's
